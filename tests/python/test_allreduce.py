"""Worker.allreduce: the all-reduce from Python (numpy arrays and torch tensors, in place), by
the ring and directly."""


import time

import numpy as np
import pytest
import torch

import layerps
from conftest import FAST, on_every_worker


def _on_every_worker(workers, fn):
    return on_every_worker(workers, fn, timeout=120)


def test_allreduce_sums_numpy_arrays_and_torch_tensors_in_place():
    with layerps.LocalCluster(num_servers=1, num_workers=3, transport="inproc", **FAST) as c:
        n = 100_003  # not divisible by 3
        arrays = [np.arange(n, dtype=np.float32) % 997 + r for r in range(3)]
        tensors = [torch.full((5, 7), float(r + 1)) for r in range(3)]
        results = {}

        def step(r, w):
            results[r] = w.allreduce(arrays[r])
            w.allreduce(tensors[r], timeout=60, segment_bytes=4096)

        assert _on_every_worker(c.workers, step) == {}
        want = 3 * (np.arange(n, dtype=np.float32) % 997) + 3
        for r in range(3):
            assert results[r] is arrays[r]  # in place, the same object back
            np.testing.assert_array_equal(arrays[r], want)
            assert torch.equal(tensors[r], torch.full((5, 7), 6.0))


def test_allreduce_among_a_subset_and_errors():
    with layerps.LocalCluster(num_servers=1, num_workers=3, transport="inproc", **FAST) as c:
        w0, w1, w2 = c.workers
        xs = [np.full(10, r + 1, np.float32) for r in range(3)]

        def pair(r, w):
            if r in (0, 2):
                w.allreduce(xs[r], ranks=[0, 2])

        assert _on_every_worker(c.workers, pair) == {}
        np.testing.assert_array_equal(xs[0], np.full(10, 4, np.float32))
        np.testing.assert_array_equal(xs[2], np.full(10, 4, np.float32))
        np.testing.assert_array_equal(xs[1], np.full(10, 2, np.float32))
        with pytest.raises(layerps.InvalidArgumentError, match="does not include this worker"):
            w0.allreduce(xs[0], ranks=[1, 2])
        with pytest.raises(layerps.InvalidArgumentError, match="twice"):
            w0.allreduce(xs[0], ranks=[0, 1, 1])
        with pytest.raises(layerps.InvalidArgumentError, match="rank 9"):
            w0.allreduce(xs[0], ranks=[0, 9])
        with pytest.raises(layerps.InvalidArgumentError, match="float32"):
            w0.allreduce(np.zeros(4, np.float64))
        with pytest.raises(layerps.InvalidArgumentError, match="'auto', 'ring' or 'direct'"):
            w0.allreduce(xs[0], algorithm="tree")
        # Rank 1 never joins this one: the others fail at their deadline (TimeoutError). Its
        # messages expire 1 s later (kRequestGraceMs, src/worker/collectives.cc) with
        # UnavailableError, which wins only for a caller held up past that grace (a loaded
        # machine): accepted from such a call alone.
        took = {}

        def missing_one(r, w):
            if r == 1:
                return
            start = time.monotonic()
            try:
                w.allreduce(xs[r], timeout=0.3)
            finally:
                took[r] = time.monotonic() - start

        errors = _on_every_worker(c.workers, missing_one)
        assert set(errors) == {0, 2}
        for r, e in errors.items():
            if isinstance(e, layerps.UnavailableError) and took[r] >= 0.3 + 1.0:
                continue
            assert isinstance(e, layerps.TimeoutError), (r, e, took[r])


@pytest.mark.parametrize("algorithm", ["ring", "direct", "auto"])
def test_allreduce_algorithms_give_the_same_exact_sums(algorithm):
    with layerps.LocalCluster(num_servers=1, num_workers=4, transport="tcp", **FAST) as c:
        sizes = [1, 3, 4, 5, 1001, 70_001]  # 70,001 floats: above 256 KiB, 'auto' takes the ring
        arrays = {r: [(np.arange(n, dtype=np.float32) * (r + 1)) % 1021 for n in sizes] for r in range(4)}

        def step(r, w):
            for a in arrays[r]:
                w.allreduce(a, timeout=60, algorithm=algorithm, segment_bytes=8192)

        assert _on_every_worker(c.workers, step) == {}
        for i, n in enumerate(sizes):
            want = sum((np.arange(n, dtype=np.float32) * (r + 1)) % 1021 for r in range(4))
            for r in range(4):
                np.testing.assert_array_equal(arrays[r][i], want)


def test_alltoall_equal_parts_into_a_new_output_and_the_core_checks():
    """Equal parts take the fixed-size exchange (layerps.collectives.alltoall without
    splits): numpy 2-D rows among a subset; the core call refuses outputs of the wrong size
    and an output overlapping its input before anything moves."""
    from layerps import _core
    from layerps import collectives as C

    with layerps.LocalCluster(num_servers=1, num_workers=3, transport="inproc", **FAST) as c:
        results = {}

        def pair(r, w):
            if r in (0, 2):
                x = np.arange(4 * 3, dtype=np.float64).reshape(4, 3) + 100 * r
                results[r] = C.alltoall(x, process_set=[0, 2], worker=w)

        assert _on_every_worker(c.workers, pair) == {}
        for pos, r in enumerate((0, 2)):
            got, counts = results[r]
            assert got.shape == (4, 3) and got.dtype == np.float64
            # Block q (2 rows) of member q goes to member q, in member order.
            want = np.concatenate([(np.arange(12, dtype=np.float64).reshape(4, 3) + 100 * q)[2 * pos:2 * pos + 2]
                                   for q in (0, 2)])
            np.testing.assert_array_equal(got, want)
            assert counts.tolist() == [2, 2]
        w0 = c.workers[0]
        x = np.zeros(6, np.float32)
        with pytest.raises(layerps.InvalidArgumentError, match=r"members \(3\) x n"):
            _core.alltoall_async(w0._node, x, np.zeros(5, np.float32), "float32")
        with pytest.raises(layerps.InvalidArgumentError, match="overlap"):
            _core.alltoall_async(w0._node, x, x, "float32")
        with pytest.raises(layerps.InvalidArgumentError, match=r"members \(3\) x 2"):
            _core.allgather_async(w0._node, np.zeros(2, np.float32), np.zeros(4, np.float32), "float32")
