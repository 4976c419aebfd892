"""Server replacement with real daemons (docs/checkpoints.md, "Replacing a server"): a
layerps-server process is SIGKILLed mid-training, the worker's pushes for its ranges
wait, a new layerps-server started with --restore takes its rank, the held pushes reach
it, and training goes on. Every value is checked exactly."""

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np

import layerps
from conftest import kill_all

HB = dict(heartbeat_interval_ms=100, heartbeat_timeout_ms=1500, connect_timeout_ms=20000)
HB_FLAGS = ["--heartbeat_interval_ms=100", "--heartbeat_timeout_ms=1500", "--connect_timeout_ms=20000"]
SIZE, CHUNK = 5000, 500
IDS = np.arange(1, 2001, dtype=np.int64) * 1000003


def server(address, rank, logdir, extra=()):
    log = open(logdir / f"server{rank}-{len(os.listdir(logdir))}.log", "w")
    p = subprocess.Popen([layerps.tool_path("layerps-server"), f"--scheduler={address}",
                          f"--rank={rank}", *HB_FLAGS, *extra],
                         stdout=log, stderr=subprocess.STDOUT)
    log.close()
    return p


def grads(k):
    rng = np.random.default_rng(k)
    return (rng.integers(-4, 5, SIZE).astype(np.float32),
            rng.integers(-4, 5, (len(IDS), 4)).astype(np.float32))


def step(w, d, s, k):
    g, rows = grads(k)
    a, b = w.push(d, g), w.push_sparse(s, IDS, rows)
    a.wait(timeout=60)
    b.wait(timeout=60)


def test_sigkilled_server_replaced_mid_training(tmp_path):
    ckpt, logs = tmp_path / "ckpt", tmp_path / "logs"
    logs.mkdir()
    sched = layerps.Scheduler("tcp://127.0.0.1:0", num_servers=2, num_workers=1, **HB,
                              dense_chunk_elems=CHUNK, replace_servers_ms=60000)
    procs = [server(sched.address, r, logs) for r in range(2)]
    try:
        w = layerps.Worker(sched.address, **HB)
        d = w.declare_dense("d", SIZE)  # rule sum: every value an exact sum of integers
        s = w.declare_sparse("emb", 4)
        for k in range(4):
            step(w, d, s, k)
        w.checkpoint(str(ckpt))
        step(w, d, s, 4)  # after the checkpoint: lost on the dead server's ranges only

        procs[1].send_signal(signal.SIGKILL)
        procs[1].wait(timeout=10)
        # Training goes on: pushes for the dead server's ranges wait for the replacement.
        errors = []

        def train():
            try:
                for k in (5, 6):
                    step(w, d, s, k)
            except Exception as e:  # noqa: BLE001 - reported by the assertion below
                errors.append(e)

        t = threading.Thread(target=train)
        t.start()
        deadline = time.time() + 20
        while sched.stats()["dead_nodes"] < 1 and time.time() < deadline:
            time.sleep(0.05)
        assert sched.stats()["dead_nodes"] == 1
        time.sleep(0.5)
        assert t.is_alive(), "the pushes for the dead server's ranges did not wait"
        procs.append(server(sched.address, 1, logs, [f"--restore={ckpt}"]))
        t.join(timeout=60)
        assert not t.is_alive() and not errors, errors
        assert w.stats()["resent"] > 0

        # Each chunk or row is either on the surviving server (every step) or on the
        # replacement (the checkpoint's steps 0..3, then the held steps 5 and 6).
        full = [sum(grads(k)[i] for k in range(7)) for i in (0, 1)]
        replaced = [sum(grads(k)[i] for k in (0, 1, 2, 3, 5, 6)) for i in (0, 1)]
        got_d = w.pull(d).wait(timeout=30)
        got_s = w.pull_sparse(s, IDS).wait(timeout=30)
        kinds = set()
        for c in range(SIZE // CHUNK):
            sl = slice(c * CHUNK, (c + 1) * CHUNK)
            if np.array_equal(got_d[sl], full[0][sl]):
                kinds.add("kept")
            else:
                np.testing.assert_array_equal(got_d[sl], replaced[0][sl], err_msg=f"chunk {c}")
                kinds.add("replaced")
        assert kinds == {"kept", "replaced"}
        rows_replaced = 0
        for i in range(len(IDS)):
            if not np.array_equal(got_s[i], full[1][i]):
                np.testing.assert_array_equal(got_s[i], replaced[1][i], err_msg=f"id {IDS[i]}")
                rows_replaced += 1
        assert 0 < rows_replaced < len(IDS)

        step(w, d, s, 7)  # the cluster trains on normally
        np.testing.assert_array_equal(w.pull(d).wait(timeout=30), got_d + grads(7)[0])
        w.stop()
        sched.join(timeout=30)  # raises if the job failed
        for p in (procs[0], procs[2]):
            assert p.wait(timeout=30) == 0
    finally:
        kill_all(procs)
        sched.stop()


def test_a_server_that_cannot_take_the_place_is_refused(tmp_path):
    # Without replace_servers_ms a complete cluster refuses a further server; with it,
    # only a vacant rank can be taken.
    logs = tmp_path / "logs"
    logs.mkdir()
    sched = layerps.Scheduler("tcp://127.0.0.1:0", num_servers=1, num_workers=1, **HB,
                              replace_servers_ms=60000)
    procs = [server(sched.address, 0, logs)]
    try:
        w = layerps.Worker(sched.address, **HB)
        extra = subprocess.run([layerps.tool_path("layerps-server"), f"--scheduler={sched.address}",
                                *HB_FLAGS, "--connect_timeout_ms=5000"],
                               capture_output=True, text=True, timeout=30)
        assert extra.returncode != 0
        assert "the cluster is already complete" in extra.stderr, extra.stderr
        w.stop()
    finally:
        kill_all(procs)
        sched.stop()


def test_replication_loses_no_acknowledged_update_under_sigkill(tmp_path):
    """Three layerps-server processes with replication; a worker pushes a known sequence
    (rule sum, integers: exact sums) with several pushes in flight while a random server
    is SIGKILLed at a random point. Every push completes, and the values are exactly the
    sum of all of them. Three rounds, each with its own victim and moment."""
    logs = tmp_path / "logs"
    logs.mkdir()
    rng = np.random.default_rng(1126)
    for round_ in range(3):
        sched = layerps.Scheduler("tcp://127.0.0.1:0", num_servers=3, num_workers=1, **HB,
                                  dense_chunk_elems=CHUNK, replication=True)
        procs = [server(sched.address, r, logs) for r in range(3)]
        try:
            w = layerps.Worker(sched.address, **HB)
            d = w.declare_dense("d", SIZE)
            s = w.declare_sparse("emb", 4)
            victim = int(rng.integers(0, 3))
            kill_at = int(rng.integers(2, 40))
            want_d = np.zeros(SIZE, np.float64)
            want_s = np.zeros((len(IDS), 4), np.float64)
            pending = []
            for k in range(60):
                g = rng.integers(-4, 5, SIZE).astype(np.float32)
                rows = rng.integers(-4, 5, (len(IDS), 4)).astype(np.float32)
                want_d += g
                want_s += rows
                if k == kill_at:
                    procs[victim].send_signal(signal.SIGKILL)
                pending += [w.push(d, g), w.push_sparse(s, IDS, rows)]
                while len(pending) > 6:
                    pending.pop(0).wait(timeout=60)
            for f in pending:
                f.wait(timeout=60)
            np.testing.assert_array_equal(w.pull(d).wait(timeout=30), want_d.astype(np.float32),
                                          err_msg=f"round {round_}, victim {victim} at push {kill_at}")
            np.testing.assert_array_equal(w.pull_sparse(s, IDS).wait(timeout=30),
                                          want_s.astype(np.float32))
            deadline = time.time() + 20
            while sched.stats()["dead_nodes"] < 1 and time.time() < deadline:
                time.sleep(0.05)
            assert sched.stats()["dead_nodes"] == 1
            w.stop()
            sched.join(timeout=30)
            for i, p in enumerate(procs):
                if i != victim:
                    assert p.wait(timeout=30) == 0
        finally:
            kill_all(procs)
            sched.stop()


def test_launch_survives_a_killed_server(tmp_path):
    """layerps-launch: with --replication the backup takes over; with --replace_servers_ms
    the launcher starts a replacement restored from --checkpoint_dir; with
    --scheduler_recovery_ms a killed scheduler is started again on its address and takes
    the cluster over. The worker kills server 1 (or the scheduler) itself, trains on, and
    checks the values exactly."""
    from conftest import run_launched
    hb = ["--heartbeat_interval_ms=100", "--heartbeat_timeout_ms=1500", "--dense_chunk_elems=500"]
    p = run_launched(["-s", "3", "-w", "1", "--timeout_s=120", "--replication", *hb, "--",
                      sys.executable, "launched_kill_server.py", "--expect=replication"])
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert "[launch] server 1 was killed by signal" in p.stdout, p.stdout[-3000:]
    assert "its backup takes over its ranges (replication)" in p.stdout
    assert "launched replication: OK" in p.stdout
    p = run_launched(["-s", "2", "-w", "1", "--timeout_s=120", "--replace_servers_ms=60000",
                      f"--checkpoint_dir={tmp_path / 'ckpt'}", *hb, "--",
                      sys.executable, "launched_kill_server.py", "--expect=replacement"])
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert f"starting a replacement restored from {tmp_path / 'ckpt'}" in p.stdout, p.stdout[-3000:]
    assert "launched replacement: OK" in p.stdout
    p = run_launched(["-s", "2", "-w", "1", "--timeout_s=120", "--scheduler_recovery_ms=60000", *hb, "--",
                      sys.executable, "launched_kill_server.py", "--expect=scheduler"])
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert "starting a new one on tcp://" in p.stdout, p.stdout[-3000:]
    assert "launched scheduler: OK" in p.stdout
