"""Uneven inputs (issue 16 defect 2): worker.join() as Horovod's, barriers that report how
many took part, and barriers that fail instead of hanging (timeout=None included)."""

import time

import pytest

import layerps
from conftest import FAST, run_parallel


def test_joined_worker_lets_the_others_barriers_go_on():
    with layerps.LocalCluster(num_servers=1, num_workers=3, **FAST) as c:
        def work(w):
            counts = []
            if w.rank != 2:  # rank 2 has no data at all
                for _ in range(3):
                    counts.append(w.barrier("workers"))  # timeout=None
            return counts, w.join(timeout=20)

        results = run_parallel(work, [(w,) for w in c.workers], timeout=30)
    by_rank = {w.rank: r for w, r in zip(c.workers, results)}
    assert by_rank[0] == ([2, 2, 2], 3)
    assert by_rank[1] == ([2, 2, 2], 3)
    assert by_rank[2] == ([], 3)


def test_barrier_without_timeout_fails_naming_a_worker_that_left_without_join():
    with layerps.LocalCluster(num_servers=1, num_workers=3, **FAST) as c:
        leaver = next(w for w in c.workers if w.rank == 2)
        others = [w for w in c.workers if w.rank != 2]
        leaver.stop()  # ran out of data, forgot join()

        def work(w):
            t0 = time.monotonic()
            with pytest.raises(layerps.UnavailableError, match="worker rank 2 left the cluster without join"):
                w.barrier("workers")  # timeout=None: must not wait forever
            return time.monotonic() - t0

        for took in run_parallel(work, [(w,) for w in others], timeout=30):
            assert took < 10


def test_barrier_timeout_names_the_missing_ranks():
    with layerps.LocalCluster(num_servers=1, num_workers=3, **FAST) as c:
        w0 = next(w for w in c.workers if w.rank == 0)
        with pytest.raises(layerps.TimeoutError, match="worker rank 1.*worker rank 2"):
            w0.barrier("workers", timeout=0.3)


def test_stall_warning_is_counted_and_the_barrier_still_completes():
    with layerps.LocalCluster(num_servers=1, num_workers=2, stall_warning_ms=200, **FAST) as c:
        def work(w):
            if w.rank == 1:
                time.sleep(1.0)
            return w.barrier("workers", timeout=20)

        assert run_parallel(work, [(w,) for w in c.workers], timeout=30) == [2, 2]
        assert c.scheduler.stats()["stall_warnings"] >= 1


def test_bsp_steps_go_on_without_the_joined_worker():
    import numpy as np
    with layerps.LocalCluster(num_servers=1, num_workers=2, **FAST) as c:
        def work(w):
            t = w.declare_dense("bsp-join", 4, "sum", sync="bsp")
            seen = []
            steps = 1 if w.rank == 1 else 3
            for _ in range(steps):
                out = np.zeros(4, dtype=np.float32)
                w.pushpull(t, np.ones(4, dtype=np.float32), out).wait(10)
                seen.append(float(out[0]))
            w.join(timeout=20)
            return w.rank, seen

        results = dict(run_parallel(work, [(w,) for w in c.workers], timeout=40))
    assert results[1] == [2.0]
    assert results[0] == [2.0, 3.0, 4.0]
