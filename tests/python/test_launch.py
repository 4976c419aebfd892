"""python -m layerps.launch: a launched cluster, its exit status, its flags."""

import subprocess
import sys

import layerps
from layerps.launch import translate
from conftest import run_launched


def test_launched_cluster_runs_the_api():
    p = run_launched(["-s", "2", "-w", "3", "--quiet_daemons", "--timeout_s=120", "--",
                      sys.executable, "launched_api.py"])
    print(p.stdout[-3000:])
    assert p.returncode == 0, p.stdout + p.stderr
    for r in range(3):
        assert f"launched worker rank {r} of 3: OK" in p.stdout


def test_launches_are_quiet_by_default_and_verbose_on_request():
    """Issue 31 item 3: without --verbose the nodes log warnings and errors only (no line per
    table declared, none per node up, no traffic dump), daemons included; with it, their
    INFO lines come, naming ranks where users think in ranks."""
    quiet = run_launched(["-s", "1", "-w", "2", "--timeout_s=120", "--", sys.executable, "launched_api.py"])
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    out = quiet.stdout + quiet.stderr
    for noise in ("' is id ", " up at ", "traffic: ", "cluster complete"):
        assert noise not in out, (noise, out[-3000:])
    assert "launched worker rank 1 of 2: OK" in out
    loud = run_launched(["-s", "1", "-w", "2", "--verbose", "--timeout_s=120", "--", sys.executable,
                         "launched_api.py"])
    assert loud.returncode == 0, loud.stdout + loud.stderr
    out = loud.stdout + loud.stderr
    assert "worker rank 0 up at " in out and "' is id " in out and "traffic: " in out, out[-3000:]


def test_a_failing_worker_fails_the_launch():
    p = run_launched(["-s", "1", "-w", "2", "--quiet_daemons", "--grace_s=5", "--timeout_s=120", "--",
                      sys.executable, "launched_api.py", "--fail"])
    assert p.returncode != 0
    assert "exited with code 3" in p.stdout, p.stdout


def test_flags_translate_to_layerps_launch():
    assert translate(["-s", "2", "-w", "3", "--", "python", "t.py", "-s"]) == \
        ["--num_servers=2", "--num_workers=3", "--", "python", "t.py", "-s"]
    assert translate(["-s=4", "--workers", "2", "-t", "60", "--quiet_daemons", "python", "x.py"]) == \
        ["--num_servers=4", "--num_workers=2", "--timeout_s=60", "--quiet_daemons", "--", "python", "x.py"]


def test_help_and_bad_flags():
    p = subprocess.run([sys.executable, "-m", "layerps.launch", "--help"], capture_output=True, text=True)
    assert p.returncode == 0 and "usage: python -m layerps.launch" in p.stdout
    p = subprocess.run([sys.executable, "-m", "layerps.launch", "--help-launch"], capture_output=True, text=True)
    assert p.returncode == 0 and "--num_servers" in p.stdout
    p = subprocess.run([sys.executable, "-m", "layerps.launch", "--no_such_flag=1", "--", "true"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "no_such_flag" in p.stderr
    p = subprocess.run([sys.executable, "-m", "layerps.launch", "-s"], capture_output=True, text=True)
    assert p.returncode != 0 and "needs a value" in p.stderr


def test_binaries_are_bundled():
    p = subprocess.run([layerps.tool_path("layerps-server"), "--help"], capture_output=True, text=True)
    assert p.returncode == 0 and "--scheduler" in p.stdout
