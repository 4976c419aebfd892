"""docs/python.md: every block marked `<!-- runnable ... -->` runs as written."""

import re
import subprocess
import sys

import pytest

from conftest import REPO

DOC = REPO / "docs" / "python.md"


def runnable_blocks():
    text = DOC.read_text()
    blocks = re.findall(r"<!-- runnable[^>]*-->\s*```python\n(.*?)```", text, flags=re.S)
    assert blocks, "docs/python.md has no runnable block"
    return blocks


@pytest.mark.parametrize("index", range(len(runnable_blocks())))
def test_doc_example_runs(index, tmp_path):
    script = tmp_path / f"doc_example_{index}.py"
    script.write_text(runnable_blocks()[index])
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                       cwd=str(tmp_path))
    print(p.stdout)
    assert p.returncode == 0, p.stdout + p.stderr
