"""Worker-to-worker tensors, traffic counters and placement from Python."""

import numpy as np
import pytest
import torch

import layerps
from conftest import FAST


def test_send_to_and_recv_from_move_tensors_between_workers():
    with layerps.LocalCluster(num_servers=1, num_workers=2, transport="inproc", **FAST) as c:
        a, b = c.workers
        x = np.arange(1000, dtype=np.float32)
        h = b.recv_from(0, 5, np.empty(1000, np.float32))
        a.send_to(1, 5, x).wait()
        np.testing.assert_array_equal(h.wait(), x)
        # torch tensors both ways, the send first this time
        t = torch.arange(6, dtype=torch.float32)
        b.send_to(0, 9, t).wait()
        out = torch.empty(6)
        assert a.recv_from(1, 9, out).wait() is out
        assert torch.equal(out, t)
        # a receive of the wrong size fails with the reason
        h = b.recv_from(0, 1, np.empty(3, np.float32))
        a.send_to(1, 1, np.ones(4, np.float32)).wait()
        with pytest.raises(layerps.InvalidArgumentError, match="4 values where 3"):
            h.wait()
        with pytest.raises(layerps.NotFoundError):
            a.send_to(7, 0, x).wait()


def test_traffic_counts_bytes_per_peer_and_table():
    with layerps.LocalCluster(num_servers=1, num_workers=1, transport="inproc", **FAST) as c:
        w = c.workers[0]
        t = w.declare_dense("w", 250)
        w.push(t, np.ones(250, np.float32)).wait()
        w.pull(t).wait()
        traffic = w.traffic()
        assert traffic["tables"][t.id] == {"bytes_sent": 1000, "bytes_received": 1000}
        assert sum(p["bytes_sent"] for p in traffic["peers"].values()) >= 1000 + 2 * 64


def test_install_placement_pins_a_layers_tables():
    with layerps.LocalCluster(num_servers=3, num_workers=1, transport="inproc",
                              dense_chunk_elems=4, **FAST) as c:
        w = c.workers[0]
        w.install_placement({"fc": [2]})
        assert w.placement() == {"fc": [2]}
        fc = w.declare_dense("fc.weight", 16, layer="fc")
        conv = w.declare_dense("conv.weight", 16, layer="conv")
        assert w.table_servers(fc) == [2]
        assert sorted(set(w.table_servers(conv))) == [0, 1, 2]
        with pytest.raises(layerps.InvalidArgumentError, match="server rank 5"):
            w.install_placement({"fc": [5]})
        with pytest.raises(layerps.FailedPreconditionError, match="fc.weight"):
            w.install_placement({"fc": [0]})
