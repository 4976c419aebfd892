"""The package's version and its tools' --version lines: one source (CMakeLists.txt)."""
import os
import re
import subprocess

import layerps

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def cmake_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        m = re.search(r"project\(LayerPS VERSION ([0-9]+\.[0-9]+\.[0-9]+)", f.read())
    assert m, "CMakeLists.txt lost its project(LayerPS VERSION ...) line"
    return m.group(1)


def test_version_is_the_cmake_projects():
    assert layerps.__version__ == cmake_version()
    assert layerps.__commit__  # a commit hash, or "unknown" outside a checkout


def test_every_bundled_tool_prints_the_same_version():
    for tool in ("layerps-scheduler", "layerps-server", "layerps-launch", "layerps-keygen", "layerps-plan"):
        r = subprocess.run([layerps.tool_path(tool), "--version"], capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == f"{tool} (LayerPS {layerps.__version__}, commit {layerps.__commit__})"


def test_the_build_tree_package_lists_every_python_file():
    """bindings/python/CMakeLists.txt copies the pure-Python files by name into the build
    tree's package (LAYERPS_BUILD_PYTHON): a file missing there imports in the wheel but
    not from the build tree."""
    import re
    src = os.path.join(ROOT, "bindings", "python")
    with open(os.path.join(src, "CMakeLists.txt")) as f:
        listed = re.search(r"set\(LAYERPS_PY_FILES\s+([^)]*)\)", f.read()).group(1).split()
    present = sorted(f for f in os.listdir(os.path.join(src, "layerps")) if f.endswith(".py"))
    assert sorted(listed) == present
