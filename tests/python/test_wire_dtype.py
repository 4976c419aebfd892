"""wire_dtype="fp16"/"bf16": values travel narrowed, the servers keep float32. Pulled
values equal the float32 sums of the narrowed pushes rounded once (torch's own fp16/bf16
rounding is the reference), and the table's payload bytes are half the float32 table's.
Also part_bytes: a dense request split into parts comes back whole."""

import numpy as np
import pytest
import torch

import layerps
from conftest import FAST

TORCH = {"fp16": torch.float16, "bf16": torch.bfloat16}


def rnd(x, wire):
    """float32 array x rounded to the wire type and back (torch rounds to nearest even)."""
    return torch.from_numpy(np.ascontiguousarray(x)).to(TORCH[wire]).to(torch.float32).numpy()


@pytest.mark.parametrize("wire", ["fp16", "bf16"])
def test_dense_and_sparse_values_and_bytes(wire):
    with layerps.LocalCluster(num_servers=2, num_workers=1, transport="tcp", dense_chunk_elems=1000,
                              **FAST) as c:
        w = c.workers[0]
        n = 5000
        rng = np.random.default_rng(1)
        g1 = rng.uniform(-1, 1, n).astype(np.float32)
        g2 = rng.uniform(-1, 1, n).astype(np.float32)
        ref = w.declare_dense("ref", n)
        nar = w.declare_dense("nar", n, wire_dtype=wire)
        for t in (ref, nar):
            w.push(t, g1).wait()
            w.push(t, g2).wait()
        want = rnd(rnd(g1, wire) + rnd(g2, wire), wire)  # float32 sum on the server
        got = w.pull(nar).wait()
        np.testing.assert_array_equal(got, want)
        eps = 2.0 ** -11 if wire == "fp16" else 2.0 ** -8
        np.testing.assert_allclose(got, w.pull(ref).wait(), rtol=0,
                                   atol=float(4 * eps * (np.abs(g1) + np.abs(g2)).max()))
        # sgd accumulates in float32 too
        s = w.declare_dense("sgd", n, "sgd", lr=0.5, wire_dtype=wire)
        w.push(s, g1).wait()
        out = w.pushpull(s, g2).wait()
        np.testing.assert_array_equal(out, rnd((-0.5 * rnd(g1, wire)) - 0.5 * rnd(g2, wire), wire))

        sp = w.declare_sparse("emb", 4, wire_dtype=wire)
        keys = np.arange(0, 3000, 3, dtype=np.uint64)
        rows = rng.uniform(-1, 1, (len(keys), 4)).astype(np.float32)
        w.push_sparse(sp, keys, rows).wait()
        np.testing.assert_array_equal(w.pull_sparse(sp, keys).wait(), rnd(rows, wire))

        tables = w.traffic()["tables"]
        assert tables[nar.id]["bytes_sent"] * 2 == tables[ref.id]["bytes_sent"]
        assert tables[nar.id]["bytes_received"] * 2 == tables[ref.id]["bytes_received"]


def test_wire_dtype_is_checked_and_part_of_the_spec():
    with layerps.LocalCluster(num_servers=1, num_workers=1, transport="inproc", **FAST) as c:
        w = c.workers[0]
        with pytest.raises(layerps.InvalidArgumentError, match="wire_dtype"):
            w.declare_dense("x", 10, wire_dtype="fp8")
        w.declare_dense("y", 10, wire_dtype="bf16")
        with pytest.raises(layerps.LayerPSError, match="wire_dtype"):
            w.declare_dense("y", 10, wire_dtype="fp16")


def test_part_bytes_splits_and_reassembles():
    with layerps.LocalCluster(num_servers=1, num_workers=1, transport="tcp", part_bytes=4096,
                              **FAST) as c:
        w = c.workers[0]
        n = 10 * 1024 + 1  # 11 parts of at most 1024 floats
        t = w.declare_dense("big", n)
        x = np.arange(n, dtype=np.float32)
        before = w.stats()["requests_sent"]
        w.push(t, x).wait()
        assert w.stats()["requests_sent"] - before == 11
        np.testing.assert_array_equal(w.pull(t).wait(), x)
