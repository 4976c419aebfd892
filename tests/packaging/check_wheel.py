"""Run by tests/packaging/wheel_test.sh inside the fresh venv the wheel was installed in,
with the system copies of the libraries the wheel bundles hidden from the loader.

Checks: imported from the venv (not the source tree), one version everywhere, every tool
answers --version, a local cluster in this process computes exact sums, and a launched
cluster of real daemons (layerps-launch: scheduler, 2 servers, 2 workers) does too."""
import os
import subprocess
import sys

import numpy as np

import layerps

root = os.path.realpath(os.environ["LAYERPS_ROOT"])
where = os.path.realpath(layerps.__file__)
assert not where.startswith(root + os.sep), f"layerps imported from the source tree: {where}"
assert layerps.__version__ == os.environ["EXPECTED_VERSION"], layerps.__version__
from importlib.metadata import version  # noqa: E402

assert version("layerps") == layerps.__version__, (version("layerps"), layerps.__version__)
for tool in ("layerps-scheduler", "layerps-server", "layerps-launch", "layerps-keygen", "layerps-plan"):
    out = subprocess.run([layerps.tool_path(tool), "--version"], capture_output=True, text=True,
                         check=True).stdout
    assert f"LayerPS {layerps.__version__}" in out, out

with layerps.LocalCluster(num_servers=2, num_workers=1) as c:
    w = c.workers[0]
    t = w.declare_dense("w", 1000)
    w.push(t, np.full(1000, 2.0, dtype=np.float32)).wait()
    assert (w.pull(t).wait() == 2.0).all()

worker = """
import numpy as np, layerps
w = layerps.init()
t = w.declare_dense("w", 4096)
w.push(t, np.full(4096, w.rank + 1, np.float32)).wait(timeout=30)
w.barrier(timeout=30)
assert (w.pull(t).wait(timeout=30) == 3.0).all()
print("WORKER", w.rank, "OK", flush=True)
layerps.shutdown()
"""
p = subprocess.run([sys.executable, "-m", "layerps.launch", "-s", "2", "-w", "2", "--timeout_s=120",
                    "--", sys.executable, "-c", worker], capture_output=True, text=True, timeout=300)
assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
assert p.stdout.count(" OK") == 2, p.stdout
print(f"wheel: layerps {layerps.__version__} (commit {layerps.__commit__}) from {where}: OK")
