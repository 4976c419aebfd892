"""Shared helpers of the Python suite (run by scripts/test-python.sh against the installed
package: this folder, not bindings/python, is on sys.path)."""

import os
import signal
import random
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import layerps

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "python"
HERE = Path(__file__).resolve().parent

# Short timeouts everywhere so that a bug fails a test instead of hanging the suite.
FAST = dict(heartbeat_interval_ms=100, heartbeat_timeout_ms=1000, connect_timeout_ms=10000,
            request_timeout_ms=10000)


def on_every_worker(workers, fn, timeout=180):
    """Runs fn(rank, worker) on one thread per worker (the collectives block with the GIL
    released); returns the exceptions raised, by rank. A thread still running after
    `timeout` seconds counts as an AssertionError for its rank."""
    errors = {}

    def run(r, w):
        try:
            fn(r, w)
        except Exception as e:  # noqa: BLE001 (reported by the test)
            errors[r] = e

    threads = [threading.Thread(target=run, args=(r, w), daemon=True) for r, w in enumerate(workers)]
    for t in threads:
        t.start()
    for r, t in enumerate(threads):
        t.join(timeout)
        if t.is_alive():
            errors.setdefault(r, AssertionError(f"rank {r} did not finish within {timeout} s"))
    return errors


def run_parallel(fn, args_list, timeout=60):
    """Runs fn(*args) for each args in threads (the workers of an in-process cluster);
    returns the results in order, re-raising the first exception."""
    results = [None] * len(args_list)
    errors = [None] * len(args_list)

    def run(i, args):
        try:
            results[i] = fn(*args)
        except BaseException as e:  # re-raised in the test's thread
            errors[i] = e

    threads = [threading.Thread(target=run, args=(i, a), daemon=True) for i, a in enumerate(args_list)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        if t.is_alive():
            raise AssertionError(f"a worker thread did not finish within {timeout} s")
    for e in errors:
        if e is not None:
            raise e
    return results


def free_ports(n=1):
    """The first of n consecutive ports of 127.0.0.1 that are free right now, taken below
    the kernel's ephemeral range: a port from there (what binding port 0 returns) can be
    handed to another socket, one of the launched nodes' own binds to port 0 say, before
    the process the test gives it to binds it; one below the range is never handed out."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.Random()
    for _ in range(200):
        first = rng.randrange(10000, max(low - n, 10001))
        ok = True
        for port in range(first, first + n):
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                ok = False
            finally:
                s.close()
            if not ok:
                break
        if ok:
            return first
    pytest.skip(f"no block of {n} free ports below {low}")


def kill_all(procs):
    """SIGKILLs the processes of `procs` still running, then reaps them all (bounded)."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
    for p in procs:
        p.wait(timeout=10)


def run_launched(args, timeout=180, env=None):
    """python -m layerps.launch ARGS, returning the CompletedProcess (text output)."""
    e = dict(os.environ)
    e.pop("LAYERPS_SCHEDULER", None)
    if env:
        e.update(env)
    return subprocess.run([sys.executable, "-m", "layerps.launch"] + list(args), capture_output=True,
                          text=True, timeout=timeout, env=e, cwd=str(HERE))


@pytest.fixture
def cluster():
    """2 servers and 2 workers in this process (inproc transport)."""
    with layerps.LocalCluster(num_servers=2, num_workers=2, **FAST) as c:
        yield c


@pytest.fixture
def worker():
    """One worker of a 2-server, 1-worker in-process cluster."""
    with layerps.LocalCluster(num_servers=2, num_workers=1, **FAST) as c:
        yield c.workers[0]


# Test tiers (docs/testing.md), as the C++ suite's ctest labels: every test is marked with
# its module's tier, and `slow` on top for the modules and tests listed. Run one tier with
# `scripts/test-python.sh -m unit` (the fast tier) or `-m "not slow"`.
TIERS = {
    "unit": {"test_bench_plot", "test_bench_summaries", "test_docs", "test_package", "test_profile", "test_results_pages"},
    "cluster": {"test_algorithms", "test_allreduce", "test_api", "test_horovod_api", "test_hybrid",
                "test_join", "test_optimizers", "test_peer_placement", "test_sparse_bounds",
                "test_split", "test_layerwise", "test_torch", "test_torch_optimizer", "test_wire_dtype", "test_recsys"},
    "multiprocess": {"test_checkpoint", "test_examples", "test_failure", "test_getting_started",
                     "test_ddp", "test_elastic", "test_kubernetes", "test_launch", "test_launchers", "test_observability",
                     "test_replacement", "test_soak"},
    # Without a GPU its GPU cases skip with the reason; its no-GPU case runs everywhere.
    "gpu": {"test_gpu"},
}
SLOW_MODULES = {"test_elastic", "test_examples", "test_getting_started", "test_replacement", "test_launchers", "test_ddp",
                "test_kubernetes"}
SLOW_TESTS = {"test_short_soak_with_faults_keeps_every_acknowledged_update_and_flat_memory",
              "test_dlrm_with_two_and_four_workers_equals_one_process"}


def pytest_configure(config):
    for tier, what in (("unit", "no cluster"), ("cluster", "in-process clusters"),
                       ("multiprocess", "real daemons and launchers"),
                       ("slow", "a test of 20 s and more"), ("gpu", "needs a CUDA device")):
        config.addinivalue_line("markers", f"{tier}: {what} (docs/testing.md)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1]
        tier = next((t for t, mods in TIERS.items() if module in mods), None)
        if tier is None:
            raise pytest.UsageError(f"{module} is in no test tier: add it to TIERS in conftest.py")
        item.add_marker(getattr(pytest.mark, tier))
        if module in SLOW_MODULES or item.name.split("[")[0] in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
