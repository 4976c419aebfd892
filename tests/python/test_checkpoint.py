"""Checkpoints with real daemons: server processes SIGKILLed after a checkpoint, a new
cluster of layerps-server processes started with --restore, and the values (and the
update rules' state) exactly those of the checkpoint (docs/checkpoints.md)."""

import os
import subprocess

import numpy as np
import pytest

import layerps
from conftest import kill_all

HB = dict(heartbeat_interval_ms=100, heartbeat_timeout_ms=1500, connect_timeout_ms=20000)
HB_FLAGS = ["--heartbeat_interval_ms=100", "--heartbeat_timeout_ms=1500", "--connect_timeout_ms=20000"]
IDS = np.arange(0, 3000, 7, dtype=np.int64) * 1000003


def start_servers(address, n, logdir, extra=()):
    procs = []
    for i in range(n):
        log = open(logdir / f"server{i}-{os.getpid()}-{len(os.listdir(logdir))}.log", "w")
        procs.append(subprocess.Popen(
            [layerps.tool_path("layerps-server"), f"--scheduler={address}", f"--rank={i}",
             *HB_FLAGS, *extra], stdout=log, stderr=subprocess.STDOUT))
        log.close()
    return procs


def declare(w):
    d = w.declare_dense("dense", 5000, rule="adam", lr=0.01, init="uniform", init_a=-1, init_b=1)
    s = w.declare_sparse("emb", 8, rule="adagrad", lr=0.1)
    return d, s


def step(w, d, s, k):
    rng = np.random.default_rng(k)
    w.push(d, rng.integers(-4, 5, 5000).astype(np.float32)).wait(timeout=30)
    ids = IDS[rng.integers(0, len(IDS), 500)]
    w.push_sparse(s, ids, rng.integers(-4, 5, (500, 8)).astype(np.float32)).wait(timeout=30)


def read(w, d, s):
    return w.pull(d).wait(timeout=30).copy(), w.pull_sparse(s, IDS).wait(timeout=30).copy()


@pytest.mark.parametrize("restored_servers", [2, 3])
def test_sigkilled_servers_restored_exactly(tmp_path, restored_servers):
    ckpt = tmp_path / "ckpt"
    logs = tmp_path / "logs"
    logs.mkdir()
    sched = layerps.Scheduler("tcp://127.0.0.1:0", num_servers=2, num_workers=1, **HB,
                              dense_chunk_elems=1000, tolerate_worker_loss=True)
    servers = start_servers(sched.address, 2, logs)
    try:
        w = layerps.Worker(sched.address, **HB)
        d, s = declare(w)
        for k in range(6):
            step(w, d, s, k)
        at_ckpt = read(w, d, s)
        path = w.checkpoint(str(ckpt))
        assert os.path.dirname(path) == str(ckpt)
        assert sorted(os.listdir(path)) == ["server-0.lpsckpt", "server-1.lpsckpt"]
        step(w, d, s, 6)  # applied after the checkpoint: lost with the servers
        after = read(w, d, s)
        assert not np.array_equal(after[0], at_ckpt[0])
        # The whole job dies: servers SIGKILLed, then the worker and scheduler go.
        kill_all(servers)
        w.stop()
    finally:
        kill_all(servers)
        sched.stop()

    sched = layerps.Scheduler("tcp://127.0.0.1:0", num_servers=restored_servers, num_workers=1,
                              **HB, dense_chunk_elems=1000)
    servers = start_servers(sched.address, restored_servers, logs, [f"--restore={ckpt}"])
    try:
        w = layerps.Worker(sched.address, **HB)
        d, s = declare(w)
        got = read(w, d, s)
        np.testing.assert_array_equal(got[0], at_ckpt[0])
        np.testing.assert_array_equal(got[1], at_ckpt[1])
        # Adam's moments and Adagrad's accumulators came back: the same step lands on the
        # same values as in the first cluster.
        step(w, d, s, 6)
        again = read(w, d, s)
        np.testing.assert_array_equal(again[0], after[0])
        np.testing.assert_array_equal(again[1], after[1])
        w.stop()
        for p in servers:
            assert p.wait(timeout=30) == 0
    finally:
        kill_all(servers)
        sched.stop()


def test_restore_errors_are_clear(tmp_path):
    # A server whose --restore holds no checkpoint exits at once with the reason (exit 1).
    empty = tmp_path / "empty"
    empty.mkdir()
    r = subprocess.run([layerps.tool_path("layerps-server"), "--scheduler=tcp://127.0.0.1:1",
                        f"--restore={empty}"], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert "no checkpoint set" in r.stderr, r.stderr
    # In-process cluster: checkpoint, then a declare with another layout is refused.
    with layerps.LocalCluster(num_servers=2, num_workers=1) as c:
        w = c.workers[0]
        t = w.declare_dense("x", 100, rule="sgd", lr=0.5)
        w.push(t, np.ones(100, np.float32)).wait(timeout=30)
        path = w.checkpoint(tmp_path / "c")
        assert os.path.isdir(path)
        with pytest.raises(layerps.InvalidArgumentError):
            w.checkpoint(123)
    with layerps.LocalCluster(num_servers=1, num_workers=1, restore_dir=str(tmp_path / "c")) as c:
        w = c.workers[0]
        with pytest.raises(layerps.FailedPreconditionError) as e:
            w.declare_dense("x", 101, rule="sgd", lr=0.5)
        assert "declared as dense, 101 elements" in str(e.value)
        t = w.declare_dense("x", 100, rule="sgd", lr=0.5)
        np.testing.assert_array_equal(w.pull(t).wait(timeout=30), -0.5)
