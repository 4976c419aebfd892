"""Recommendation models (layerps/torch/collection.py, examples/python/dlrm.py): keyed
jagged features, embedding collections with one fused request per server and step, the
servers' rules against references, bad input refused before anything is sent, and DLRM
trained by 2 and 4 workers equal to one process."""

import os
import sys

import numpy as np
import pytest
import torch

import layerps
import layerps.torch as lt
from conftest import EXAMPLES, FAST, run_parallel

sys.path.insert(0, str(EXAMPLES))


def kjt3():
    # 3 features, batch 2: f0 = [[1, 2], [3]], f1 = [[], [4]], f2 = [[5], [5, 6]]
    return lt.KeyedJaggedTensor.from_lengths_sync(["f0", "f1", "f2"], torch.tensor([1, 2, 3, 4, 5, 5, 6]),
                                                  torch.tensor([2, 1, 0, 1, 1, 2]))


def test_keyed_jagged_tensor_layout_and_views():
    kjt = kjt3()
    assert kjt.keys() == ["f0", "f1", "f2"] and kjt.stride() == 2
    assert kjt.length_per_key() == [3, 1, 3] and kjt.offset_per_key() == [0, 3, 4, 7]
    d = kjt.to_dict()
    assert d["f0"].values().tolist() == [1, 2, 3] and d["f0"].lengths().tolist() == [2, 1]
    assert d["f1"].values().tolist() == [4] and d["f1"].offsets().tolist() == [0, 0, 1]
    assert [t.tolist() for t in d["f2"].to_dense()] == [[5], [5, 6]]
    same = lt.KeyedJaggedTensor.from_offsets_sync(kjt.keys(), kjt.values(), kjt.offsets())
    assert same.lengths().tolist() == kjt.lengths().tolist()


@pytest.mark.parametrize("kwargs, what", [
    (dict(lengths=[2, 1, 0, 1, 1, 1]), "sum to 6 but there are 7 values"),
    (dict(lengths=[2, 1, 0, 1, 4, -1]), "negative length"),
    (dict(lengths=[2, 1, 0, 1, 3]), "lengths for 3 keys"),
    (dict(lengths=[2, 1, 0, 1, 1, 2], weights=[1.0] * 6), "6 weights for 7 values"),
    (dict(offsets=[1, 3, 3, 4, 5, 7, 7]), "start at 0"),
    (dict(offsets=[0, 3, 2, 4, 5, 7, 7]), "must not decrease"),
    (dict(lengths=[2, 1, 0, 1, 1, 2], stride=3), "stride 3"),
])
def test_keyed_jagged_tensor_refuses_bad_input(kwargs, what):
    with pytest.raises(layerps.InvalidArgumentError, match=what):
        lt.KeyedJaggedTensor(["f0", "f1", "f2"], torch.tensor([1, 2, 3, 4, 5, 5, 6]), **kwargs)


class FakeTorchRecKJT:
    """What a TorchRec KeyedJaggedTensor offers the collections (duck-typed)."""

    def __init__(self, kjt):
        self._k = kjt

    def keys(self):
        return self._k.keys()

    def values(self):
        return self._k.values()

    def lengths(self):
        return self._k.lengths()

    def weights_or_none(self):
        return None


def tables(rule="sgd", sync="async", dims=(4, 3, 5), **kw):
    return [lt.EmbeddingBagConfig("t_a", dims[0], 100, ["f0"], pooling="sum", rule=rule, lr=0.1, sync=sync,
                                  init="uniform", init_a=-0.1, init_b=0.1, seed=3, **kw),
            lt.EmbeddingBagConfig("t_b", dims[1], None, ["f1"], pooling="mean", rule=rule, lr=0.1, sync=sync,
                                  init="uniform", init_a=-0.1, init_b=0.1, seed=4, **kw),
            lt.EmbeddingBagConfig("t_c", dims[2], 10, ["f2"], pooling="sum", rule=rule, lr=0.1, sync=sync,
                                  init="uniform", init_a=-0.1, init_b=0.1, seed=5, **kw)]


def reference_pool(rows, kjt, configs):
    """The pooled values of kjt from {table: {id: row}} (a plain loop)."""
    out = []
    by_feature = {f: t for t in configs for f in t.feature_names}
    for k in kjt.keys():
        t = by_feature[k]
        jt = kjt[k]
        block = []
        for ids in jt.to_dense():
            vecs = [rows[t.name][int(i)] for i in ids]
            v = np.sum(vecs, axis=0) if vecs else np.zeros(t.embedding_dim)
            if t.pooling == "mean" and vecs:
                v = v / len(vecs)
            block.append(v)
        out.append(np.array(block))
    return np.concatenate(out, axis=1)


def test_collection_pools_like_a_reference_and_takes_torchrec_input():
    with layerps.LocalCluster(num_servers=2, num_workers=1, **FAST) as c:
        w = c.workers[0]
        configs = tables()
        ebc = lt.EmbeddingBagCollection(configs, worker=w)
        kjt = kjt3()
        got = ebc(kjt)
        assert got.keys() == ["f0", "f1", "f2"] and got.values().shape == (2, 12)
        rows = {}
        for t, f in ((configs[0], "f0"), (configs[1], "f1"), (configs[2], "f2")):
            ids = kjt[f].values().unique()
            pulled = w.pull_sparse(ebc._tables[t.name], ids).wait(10)
            rows[t.name] = {int(i): np.asarray(r) for i, r in zip(ids, pulled)}
        np.testing.assert_allclose(got.values().detach().numpy(), reference_pool(rows, kjt, configs), rtol=1e-6)
        again = ebc(FakeTorchRecKJT(kjt))
        assert torch.equal(again.values(), got.values())
        assert torch.equal(got["f1"], got.values()[:, 4:7])


@pytest.mark.parametrize("rule", ["sgd", "adagrad", "rowwise_adagrad"])
def test_each_rule_trains_the_rows_as_a_reference_does(rule):
    """Three steps of sum-pooled lookups and a linear loss: the servers' rows equal a
    NumPy reference of the rule (FBGEMM's exact row-wise Adagrad for rowwise_adagrad)."""
    eps, lr = 1e-8, 0.1
    with layerps.LocalCluster(num_servers=2, num_workers=1, **FAST) as c:
        w = c.workers[0]
        configs = [lt.EmbeddingBagConfig("r", 4, 50, ["f0", "f1"], pooling="sum", rule=rule, lr=lr,
                                         hyper={} if rule == "sgd" else {"eps": eps},
                                         init="uniform", init_a=-0.5, init_b=0.5, seed=9)]
        ebc = lt.EmbeddingBagCollection(configs, worker=w)
        ids = torch.arange(50)
        rows = np.asarray(w.pull_sparse(ebc._tables["r"], ids).wait(10), dtype=np.float64)
        state = np.zeros_like(rows) if rule == "adagrad" else np.zeros(len(rows))
        rng = np.random.default_rng(0)
        for step in range(3):
            values = torch.from_numpy(rng.integers(0, 50, 12))
            kjt = lt.KeyedJaggedTensor.from_lengths_sync(["f0", "f1"], values, torch.tensor([2, 1, 3, 2, 1, 3]))
            coeff = torch.from_numpy(rng.normal(size=(3, 8)).astype(np.float32))
            loss = (ebc(kjt).values() * coeff).sum()
            loss.backward()
            ebc.flush()
            # The reference: each id's gradient summed over its occurrences (features f0, f1).
            g = np.zeros_like(rows)
            for fi, f in enumerate(["f0", "f1"]):
                jt = kjt[f]
                for b, bag in enumerate(jt.to_dense()):
                    for i in bag:
                        g[int(i)] += coeff[b, fi * 4:(fi + 1) * 4].numpy()
            touched = np.unique(values.numpy())
            for i in touched:
                if rule == "sgd":
                    rows[i] -= lr * g[i]
                elif rule == "adagrad":
                    state[i] += g[i] ** 2
                    rows[i] -= lr * g[i] / (np.sqrt(state[i]) + eps)
                else:
                    state[i] += np.mean(g[i] ** 2)
                    rows[i] -= lr * g[i] / (np.sqrt(state[i]) + eps)
        got = np.asarray(w.pull_sparse(ebc._tables["r"], ids).wait(10))
        np.testing.assert_allclose(got, rows, rtol=2e-5, atol=2e-6)


def test_one_fused_pull_and_one_fused_push_per_server_per_step():
    """Five tables on two servers: a training step sends one pull and one push to each
    server (counted by the traffic counters), against 2 x 5 x 2 for one module per table."""
    with layerps.LocalCluster(num_servers=2, num_workers=1, **FAST) as c:
        w = c.workers[0]
        feats = [f"f{i}" for i in range(5)]
        configs = [lt.EmbeddingBagConfig(f"m{i}", 4, None, [f], rule="rowwise_adagrad", lr=0.05)
                   for i, f in enumerate(feats)]
        ebc = lt.EmbeddingBagCollection(configs, worker=w)
        singles = [lt.EmbeddingBag(None, 4, worker=w, name=f"s{i}", mode="sum", rule="rowwise_adagrad",
                                   lr=0.05) for i in range(5)]
        rng = np.random.default_rng(1)

        servers = {n.id for n in w.nodes() if n.role == layerps._core.Role.SERVER}

        def sent():  # data messages to the servers (heartbeats go to the scheduler)
            return sum(p["messages_sent"] for i, p in w.traffic()["peers"].items() if i in servers)

        def batch():
            values = torch.from_numpy(rng.integers(0, 1 << 40, 5 * 16 * 3))
            return lt.KeyedJaggedTensor.from_lengths_sync(feats, values, torch.full((5 * 16,), 3))

        ebc(batch()).values().sum().backward()  # warm-up: the first step
        ebc.flush()
        before = sent()
        ebc(batch()).values().sum().backward()
        ebc.flush()
        fused = sent() - before
        before = sent()
        kjt = batch()
        out = [m(kjt[f].values(), kjt[f].offsets()[:-1]) for m, f in zip(singles, feats)]
        torch.cat(out, 1).sum().backward()
        for m in singles:
            m.flush()
        separate = sent() - before
        print(f"messages per step to 2 servers: fused collection {fused}, one module per table {separate}")
        assert fused == 2 * 2
        assert separate == 2 * 5 * 2


def test_bad_input_is_refused_before_anything_is_sent():
    with layerps.LocalCluster(num_servers=2, num_workers=1, **FAST) as c:
        w = c.workers[0]
        ebc = lt.EmbeddingBagCollection(tables(), worker=w)
        servers = {n.id for n in w.nodes() if n.role == layerps._core.Role.SERVER}

        def to_servers():
            return sum(p["messages_sent"] for i, p in w.traffic()["peers"].items() if i in servers)

        sent = to_servers()
        unknown = lt.KeyedJaggedTensor.from_lengths_sync(["f0", "nope"], torch.tensor([1, 2]),
                                                         torch.tensor([1, 0, 0, 1]))
        with pytest.raises(layerps.InvalidArgumentError, match="feature 'nope' is served by no table"):
            ebc(unknown)
        outside = lt.KeyedJaggedTensor.from_lengths_sync(["f0", "f2"], torch.tensor([1, 10]),
                                                         torch.tensor([1, 0, 0, 1]))
        with pytest.raises(layerps.InvalidArgumentError, match=r"feature 'f2': ids must lie in \[0, 10\) for table 't_c'"):
            ebc(outside)
        weighted = lt.KeyedJaggedTensor.from_lengths_sync(["f0"], torch.tensor([1]), torch.tensor([1]),
                                                          weights=torch.tensor([0.5]))
        with pytest.raises(layerps.InvalidArgumentError, match="is_weighted=False"):
            ebc(weighted)
        assert to_servers() == sent
        with pytest.raises(layerps.InvalidArgumentError, match="feature 'f0' is in table"):
            lt.EmbeddingBagCollection(tables() + [lt.EmbeddingBagConfig("t_d", 2, None, ["f0"])], worker=w)
        with pytest.raises(layerps.InvalidArgumentError, match="unknown bound"):
            lt.EmbeddingBagCollection([lt.EmbeddingBagConfig("t_e", 2, None, ["g"], bounds={"capcity": 3})],
                                      worker=w)


def test_workers_that_disagree_on_the_tables_are_told_so():
    with layerps.LocalCluster(num_servers=1, num_workers=2, **FAST) as c:
        def build(w):
            dims = (4, 3, 5) if w.rank == 0 else (4, 3, 6)
            with pytest.raises(layerps.InvalidArgumentError, match="tables differ from worker"):
                lt.EmbeddingBagCollection(tables(dims=dims), worker=w)
        run_parallel(build, [(w,) for w in c.workers])


def dlrm_run(world, steps, global_batch, sync="bsp"):
    import dlrm
    out = {}
    with layerps.LocalCluster(num_servers=2, num_workers=world, **FAST) as c:
        def work(w):
            r = dlrm.train(w, steps, global_batch // world, seed=5, max_rows=2000, dim=8, bottom=(32, 16),
                           top=(32, 16), lr=0.05, dense_lr=0.05, sync=sync, eval_samples=1024,
                           prefix="dlrm")
            out[w.rank] = (r, [p.detach().clone() for p in r["model"].parameters()])
        run_parallel(work, [(w,) for w in c.workers], timeout=900)
    return out


def test_dlrm_with_two_and_four_workers_equals_one_process():
    """DLRM (row-wise Adagrad on bsp tables, the MLPs averaged by all-reduce) over 50 steps
    of a global batch of 64: 2 and 4 workers end with the parameters, held-out log loss and
    AUC of one process, within rounding."""
    steps, batch = 50, 64
    one = dlrm_run(1, steps, batch)[0]
    print(f"one process: loss {one[0]['losses'][0]:.4f} -> {one[0]['losses'][-1]:.4f}, held out log loss "
          f"{one[0]['logloss']:.6f}, AUC {one[0]['auc']:.6f}")
    assert one[0]["losses"][-1] < one[0]["losses"][0]
    for world in (2, 4):
        runs = dlrm_run(world, steps, batch)
        for rank, (r, params) in runs.items():
            # Float sums in another order (the all-reduce's, the servers' sum of a step's
            # pushes) round differently; Adagrad's division lets a few elements drift a
            # little over 50 steps. Nothing else may differ.
            worst = max(float((a - b).abs().max()) for a, b in zip(params, one[1]))
            assert worst < 1e-3, (world, rank, worst)
            close = sum(int(torch.isclose(a, b, rtol=1e-4, atol=1e-5).sum()) for a, b in zip(params, one[1]))
            total = sum(a.numel() for a in params)
            assert close >= 0.999 * total, (world, rank, close, total)
            assert abs(r["logloss"] - one[0]["logloss"]) < 1e-4, (world, rank, r["logloss"], one[0]["logloss"])
            assert abs(r["auc"] - one[0]["auc"]) < 1e-3, (world, rank, r["auc"], one[0]["auc"])
        print(f"{world} workers: held out log loss {runs[0][0]['logloss']:.6f}, AUC {runs[0][0]['auc']:.6f}; "
              f"largest parameter difference {worst:.2e}, {total - close} of {total} beyond 1e-4 relative")
