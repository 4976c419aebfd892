"""Bounded sparse tables from Python (docs/sparse.md): capacity with eviction, admission,
expiry keywords, the servers' counters, and the errors of bad keywords."""

import numpy as np
import pytest

import layerps
from conftest import FAST


@pytest.fixture
def local():
    """2 servers and 1 worker in this process."""
    with layerps.LocalCluster(num_servers=2, num_workers=1, **FAST) as c:
        yield c


def _stats(c, name):
    return [s.table_stats()[name] for s in c.servers]


def test_capacity_lru_holds_and_counts(local):
    w = local.workers[0]
    t = w.declare_sparse("ctr", 4, "sgd", lr=0.5, capacity=300, eviction="lru")
    spec = w._node.table_spec(t.id)
    assert spec.capacity == 300 and spec.eviction == layerps._core.Eviction.LRU
    keys = np.arange(1, 5001, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    for b in range(0, len(keys), 250):
        w.push_sparse(t, keys[b:b + 250], np.ones((250, 4), np.float32)).wait()
        assert all(s["rows_live"] <= 300 for s in _stats(local, "ctr"))
    st = _stats(local, "ctr")
    assert [s["rows_live"] for s in st] == [300, 300]
    assert sum(s["admitted"] for s in st) == 5000
    assert all(s["admitted"] - s["evicted"] - s["expired"] == s["rows_live"] for s in st)
    assert all(s["refused"] == 0 for s in st)
    # The latest ids are held (x = -0.5 * 1); the first were evicted and read as zeros.
    np.testing.assert_array_equal(w.pull_sparse(t, keys[-100:]).wait(), -0.5)
    np.testing.assert_array_equal(w.pull_sparse(t, keys[:100]).wait(), 0.0)


def test_capacity_in_bytes(local):
    # 16 floats of values + 16 of Adagrad state per row, with its metadata and index share:
    # each server turns the bytes into rows and reports them.
    w = local.workers[0]
    row = 16 * 2 * 4
    t = w.declare_sparse("bytes", 16, "adagrad", lr=0.1, capacity_bytes=200_000)
    keys = np.arange(1, 20001, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    for b in range(0, len(keys), 2000):
        w.push_sparse(t, keys[b:b + 2000], np.ones((2000, 16), np.float32)).wait()
    st = _stats(local, "bytes")
    caps = [s["capacity"] for s in st]
    assert caps[0] == caps[1] and 0 < caps[0] < 200_000 // row
    assert [s["rows_live"] for s in st] == caps
    with pytest.raises(layerps.InvalidArgumentError, match="not both"):
        w.declare_sparse("both", 4, capacity=10, capacity_bytes=1000)


def test_decayed_eviction_keyword(local):
    w = local.workers[0]
    t = w.declare_sparse("dec", 2, capacity=50, eviction="decayed", score_decay=0.9)
    spec = w._node.table_spec(t.id)
    assert spec.eviction == layerps._core.Eviction.DECAYED and abs(spec.score_decay - 0.9) < 1e-7
    hot = np.arange(1, 11, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    for k in range(30):
        cold = (np.arange(40, dtype=np.uint64) + np.uint64(1000 + 40 * k)) * np.uint64(0x9E3779B97F4A7C15)
        w.push_sparse(t, np.concatenate([hot, cold]), np.ones((50, 2), np.float32)).wait()
    assert all(s["rows_live"] <= 50 for s in _stats(local, "dec"))
    # The hot ids, pushed every step, outscore each step's new ones and are all held.
    np.testing.assert_array_equal(w.pull_sparse(t, hot).wait(), 30.0)
    with pytest.raises(layerps.InvalidArgumentError, match="score_decay"):
        w.declare_sparse("bad", 2, capacity=5, eviction="decayed", score_decay=1.5)


def test_admission_after_k_pushes(local):
    w = local.workers[0]
    t = w.declare_sparse("adm", 2, "sum", admit_after=3, init="uniform", init_a=1.0, init_b=2.0)
    keys = np.array([11, 22, 33], np.uint64)
    first = w.pull_sparse(t, keys).wait()  # the initializer's values, no row created
    assert ((first >= 1) & (first < 2)).all()
    for _ in range(2):
        w.push_sparse(t, keys, np.ones((3, 2), np.float32)).wait()
    np.testing.assert_array_equal(w.pull_sparse(t, keys).wait(), first)  # dropped so far
    st = _stats(local, "adm")
    assert sum(s["refused"] for s in st) == 6 and sum(s["rows_live"] for s in st) == 0
    w.push_sparse(t, keys, np.ones((3, 2), np.float32)).wait()  # the third: admitted
    np.testing.assert_allclose(w.pull_sparse(t, keys).wait(), first + 1, rtol=1e-6)
    st = _stats(local, "adm")
    assert sum(s["admitted"] for s in st) == 3 and sum(s["rows_live"] for s in st) == 3


def test_expiry_and_probability_keywords(local):
    w = local.workers[0]
    t = w.declare_sparse("exp", 1, "sum", expiry_steps=1)
    spec = w._node.table_spec(t.id)
    assert spec.expiry_steps == 1 and spec.capacity == 0
    p = w.declare_sparse("prob", 1, "sum", admit_probability=0.5, seed=3)
    keys = np.arange(2000, dtype=np.uint64)
    w.push_sparse(p, keys, np.ones((2000, 1), np.float32)).wait()
    st = _stats(local, "prob")
    admitted = sum(s["admitted"] for s in st)
    assert admitted + sum(s["refused"] for s in st) == 2000
    assert 850 < admitted < 1150
    got = w.pull_sparse(p, keys).wait()
    assert int((got == 1).sum()) == admitted and int((got == 0).sum()) == 2000 - admitted


def test_expiry_seconds_through_the_cluster(local):
    """Rows not pushed for longer than expiry_seconds are dropped at a later push (the
    exact timing is StoreBoundedTest.ExpiryBySeconds, on a test clock)."""
    import time
    w = local.workers[0]
    t = w.declare_sparse("exps", 1, "sum", expiry_seconds=1)
    assert w._node.table_spec(t.id).expiry_seconds == 1
    old = np.arange(100, dtype=np.uint64)
    w.push_sparse(t, old, np.ones((100, 1), np.float32)).wait()
    time.sleep(1.5)
    # One push to every server (ids spread over both) starts their expiry.
    new = np.arange(1000, 1100, dtype=np.uint64)
    w.push_sparse(t, new, np.ones((100, 1), np.float32)).wait()
    st = _stats(local, "exps")
    assert sum(s["expired"] for s in st) == 100
    assert sum(s["rows_live"] for s in st) == 100
    np.testing.assert_array_equal(w.pull_sparse(t, old[:5]).wait(), 0)
    with pytest.raises(layerps.InvalidArgumentError):
        w.declare_sparse("exps-bad", 1, expiry_seconds=-1)


def test_bad_keywords_are_refused(local):
    w = local.workers[0]
    with pytest.raises(layerps.InvalidArgumentError, match="eviction must be one of"):
        w.declare_sparse("bad1", 4, capacity=10, eviction="fifo")
    with pytest.raises(layerps.InvalidArgumentError, match="needs a capacity"):
        w.declare_sparse("bad2", 4, eviction="lfu")
    with pytest.raises(layerps.InvalidArgumentError, match="admit_probability"):
        w.declare_sparse("bad3", 4, admit_probability=1.5)
    with pytest.raises(layerps.InvalidArgumentError, match="capacity must be >= 0"):
        w.declare_sparse("bad4", 4, capacity=-1)
    w.declare_sparse("twice", 4, capacity=10)
    with pytest.raises(layerps.AlreadyExistsError, match="capacity: 10 declared, 20 asked"):
        w.declare_sparse("twice", 4, capacity=20)


def test_torch_embedding_with_capacity(local):
    import torch
    import layerps.torch as lt
    w = local.workers[0]
    emb = lt.Embedding(None, 4, worker=w, name="temb", lr=0.5, init="zeros", capacity=40,
                       eviction="lfu")
    ids = torch.arange(1, 301, dtype=torch.int64) * 7919
    for _ in range(2):
        emb(ids).sum().backward()
        emb.flush()
    st = _stats(local, "temb")
    assert all(s["rows_live"] <= 40 for s in st)
    assert all(s["admitted"] - s["evicted"] - s["expired"] == s["rows_live"] for s in st)
    assert sum(s["evicted"] for s in st) > 0


def test_cold_tier_keeps_evicted_rows(tmp_path):
    """capacity 4 in memory, 20 ids with distinct pushes: every id reads back its own value
    (from RocksDB under cold_dir), and the counters are exact (1 server: one exact LRU)."""
    with layerps.LocalCluster(num_servers=1, num_workers=1, cold_dir=str(tmp_path),
                              **FAST) as c:
        w = c.workers[0]
        t = w.declare_sparse("cold", 2, "sum", capacity=4, cold_tier=True)
        assert w._node.table_spec(t.id).cold_tier
        keys = np.arange(20, dtype=np.uint64)
        want = np.stack([keys + 1.0, -(keys + 0.5)], axis=1).astype(np.float32)
        for i in range(20):
            w.push_sparse(t, keys[i:i + 1], want[i:i + 1]).wait()
        st = c.servers[0].table_stats()["cold"]
        assert (st["rows_live"], st["spilled"], st["reloaded"]) == (4, 16, 0)
        for i in range(20):  # one at a time: ids 0..15 come back from disk
            np.testing.assert_array_equal(w.pull_sparse(t, keys[i:i + 1]).wait(), want[i:i + 1])
        st = c.servers[0].table_stats()["cold"]
        assert (st["rows_live"], st["spilled"], st["reloaded"]) == (4, 36, 20)
        assert (tmp_path / "cold").is_dir()


def test_cold_tier_without_cold_dir_fails_at_declare(local):
    with pytest.raises(layerps.LayerPSError, match="cold_tier needs the server's cold_dir"):
        local.workers[0].declare_sparse("cold", 2, "sum", capacity=4, cold_tier=True)
