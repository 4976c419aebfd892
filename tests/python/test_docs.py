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


def test_the_option_table_in_the_docs_is_the_codes():
    """docs/configuration.md's table lists every option of ps::OptionTable() with its flag and
    environment variable, and nothing else: a missing or stale row fails (issue 31)."""
    import layerps

    text = (REPO / "docs" / "configuration.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \| `--(\w+)` \| `(LAYERPS_\w+)` \|", text, flags=re.M)
    documented = {flag: (field, env) for field, flag, env in rows}
    code = {o["name"]: (o["field"], o["env"]) for o in layerps._core.option_table()}
    assert sorted(set(code) - set(documented)) == [], "options missing from docs/configuration.md"
    assert sorted(set(documented) - set(code)) == [], "rows in docs/configuration.md for no option"
    for flag, (field, env) in code.items():
        assert documented[flag] == (field, env), (flag, documented[flag], (field, env))


def test_the_horovod_table_in_the_docs_names_what_layerps_torch_has():
    """docs/python.md's Horovod -> LayerPS table: every name a row offers exists in
    layerps.torch (rows saying "not offered" must name things it does not have), and the
    common Horovod calls are all in the table."""
    import layerps.torch as lt

    text = (REPO / "docs" / "python.md").read_text()
    start = text.index("| Horovod (`horovod.torch`) | `layerps.torch` |")
    table = text[start:text.index("\n\n", start)]
    offered, refused = set(), set()
    for row in table.splitlines()[2:]:
        left, right = row.split(" | ", 1)
        names = {re.split(r"[(.]", n)[0] for n in re.findall(r"`([A-Za-z_][A-Za-z_0-9.]*)", left)}
        (refused if right.strip().startswith("not offered") else offered).update(names)
    missing = sorted(n for n in offered if not hasattr(lt, n))
    assert missing == [], f"the table offers what layerps.torch lacks: {missing}"
    stale = sorted(n for n in refused if hasattr(lt, n))
    assert stale == [], f"the table says 'not offered' for what layerps.torch has: {stale}"
    common = {"init", "shutdown", "rank", "size", "local_rank", "local_size", "cross_rank", "cross_size",
              "allreduce", "allreduce_", "allreduce_async", "synchronize", "poll", "grouped_allreduce",
              "allgather", "broadcast", "broadcast_", "alltoall", "join", "barrier", "broadcast_parameters",
              "broadcast_optimizer_state", "broadcast_object", "allgather_object", "DistributedOptimizer",
              "Compression", "Average", "Sum", "ProcessSet"}
    assert sorted(common - offered) == []
