"""layerps.torch on in-process clusters: DistributedOptimizer (both modes),
broadcast_parameters and the server-held Embedding."""

import numpy as np
import pytest
import torch

import layerps
import layerps.torch as lt
from conftest import FAST, run_parallel


def make_params(rank):
    # Different per rank on purpose: broadcast must fix it. A generator of its own, since
    # the workers run in threads and torch's global generator is shared.
    g = torch.Generator().manual_seed(100 + rank)
    return {"a": torch.nn.Parameter(torch.randn(3, 4, generator=g)),
            "b": torch.nn.Parameter(torch.randn(5, generator=g))}


def grads_for(rank, step):
    # Small integers: sums and halves are exact in float32.
    g = torch.arange(17, dtype=torch.float32) * (rank + 1) + step * 10 - rank
    return {"a": g[:12].reshape(3, 4), "b": g[12:]}


@pytest.mark.parametrize("workers", [2, 3])
def test_aggregate_mode_gives_each_step_exactly_the_average_gradient(workers):
    steps = 7  # more than the 3 tables of the rotation, twice over
    with layerps.LocalCluster(num_servers=2, num_workers=workers, dense_chunk_elems=8, **FAST) as c:
        def work(w):
            params = make_params(w.rank)
            lt.broadcast_parameters(params, 0, worker=w)
            opt = lt.DistributedOptimizer(torch.optim.SGD(params.values(), lr=1.0), params.items(),
                                          worker=w, name="agg", mode="aggregate")
            seen = []
            for t in range(steps):
                for k, p in params.items():
                    p.grad = grads_for(w.rank, t)[k].clone()
                if t == 3:
                    params["b"].grad = None  # no gradient counts as zero
                opt.step()
                seen.append({k: p.grad.clone() for k, p in params.items()})
            opt.finish()
            return seen, {k: p.detach().clone() for k, p in params.items()}

        results = run_parallel(work, [(w,) for w in c.workers])
    p0 = make_params(0)
    for t in range(steps):
        for k in ("a", "b"):
            terms = [grads_for(r, t)[k] for r in range(workers)]
            if t == 3 and k == "b":
                terms = [torch.zeros_like(x) for x in terms]
            expected = sum(terms) / workers
            for seen, _ in results:
                torch.testing.assert_close(seen[t][k], expected, rtol=0, atol=1e-6)
            p0[k].data -= expected  # SGD with lr 1 on the broadcast start
    for _, final in results:
        for k in ("a", "b"):
            torch.testing.assert_close(final[k], p0[k].detach(), rtol=0, atol=1e-4)
    # All workers end bit-identical.
    for _, final in results[1:]:
        for k in ("a", "b"):
            assert torch.equal(final[k], results[0][1][k])


def test_server_mode_applies_sgd_on_the_servers(cluster):
    lr = 0.5

    def work(w):
        params = make_params(w.rank)
        opt = lt.DistributedOptimizer(torch.optim.SGD(params.values(), lr=lr), params.items(), worker=w,
                                      mode="server", name="srv")
        start = {k: p.detach().clone() for k, p in params.items()}
        for t in range(4):
            for k, p in params.items():
                p.grad = grads_for(w.rank, t)[k].clone()
            opt.step()
        return start, {k: p.detach().clone() for k, p in params.items()}

    (s0, f0), (s1, f1) = run_parallel(work, [(w,) for w in cluster.workers])
    root = make_params(0)
    for k in ("a", "b"):
        assert torch.equal(s0[k], root[k].detach()) and torch.equal(s1[k], root[k].detach())
        expected = root[k].detach() - lr * sum((grads_for(0, t)[k] + grads_for(1, t)[k]) / 2 for t in range(4))
        torch.testing.assert_close(f0[k], expected, rtol=0, atol=1e-4)
        assert torch.equal(f0[k], f1[k])


def test_broadcast_parameters_copies_root_integer_buffers_too(cluster):
    """As Horovod's: every tensor of the state_dict is root's afterwards (BatchNorm's
    counter included), each type in one typed broadcast."""
    def work(w):
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
        torch.manual_seed(w.rank)
        for p in model.parameters():
            p.data.normal_()
        model[1].num_batches_tracked.fill_(10 + w.rank)
        lt.broadcast_parameters(model.state_dict(), 1, worker=w)
        return model.state_dict()

    a, b = run_parallel(work, [(w,) for w in cluster.workers])
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert int(a["1.num_batches_tracked"]) == 11


def test_broadcast_parameters_stages_at_most_a_bucket(cluster, monkeypatch):
    """A large contiguous tensor is broadcast in place in bucket-sized slices, small ones
    packed into buckets, a non-contiguous one packed: root's values everywhere, in the
    callers' own storage, with no unit above the bucket. A large tensor already equal on
    every worker is not sent."""
    monkeypatch.setattr(lt.ops, "BROADCAST_BUCKET_BYTES", 64)  # 16 float32s
    sizes = []
    real = lt.ops._C.broadcast

    def counting(x, *args, **kwargs):
        sizes.append(x.numel() * x.element_size())
        return real(x, *args, **kwargs)

    monkeypatch.setattr(lt.ops._C, "broadcast", counting)

    def work(w):
        g = torch.Generator().manual_seed(w.rank)
        ts = {"big": torch.randn(7, 5, generator=g),  # 140 bytes: slices of 64, 64, 12
              "t": torch.randn(6, 4, generator=g).t(),  # non-contiguous 96 bytes: packed
              "s1": torch.randn(3, generator=g), "s2": torch.randn(2, 2, generator=g),
              "e": torch.zeros(0), "i": torch.arange(5) * (w.rank + 1),
              "same": torch.arange(40, dtype=torch.float32)}  # 160 bytes, equal everywhere
        ptrs = {k: t.data_ptr() for k, t in ts.items()}
        lt.broadcast_parameters(ts, 1, worker=w, name="bucketed")
        assert all(t.data_ptr() == ptrs[k] for k, t in ts.items())
        return ts

    a, b = run_parallel(work, [(w,) for w in cluster.workers])
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert torch.equal(a["i"], torch.arange(5) * 2)
    g = torch.Generator().manual_seed(1)
    assert torch.equal(a["big"], torch.randn(7, 5, generator=g))
    assert max(sizes) <= 96 and 12 in sizes  # the non-contiguous one alone; the big one's tail
    # Per worker: big's 3 slices, t, s1 + s2, i; nothing for "same".
    assert len(sizes) == 2 * 6, sizes


def test_optimizer_argument_errors(worker):
    p = torch.nn.Parameter(torch.zeros(3))
    with pytest.raises(layerps.InvalidArgumentError, match="mode"):
        lt.DistributedOptimizer(torch.optim.SGD([p], lr=0.1), [("p", p)], worker=worker, mode="async")
    with pytest.raises(layerps.InvalidArgumentError, match="float32"):
        q = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
        lt.DistributedOptimizer(torch.optim.SGD([q], lr=0.1), [("q", q)], worker=worker)
    with pytest.raises(layerps.InvalidArgumentError, match="not unique"):
        lt.DistributedOptimizer(torch.optim.SGD([p], lr=0.1), [("p", p), ("p", p)], worker=worker)


def test_embedding_pulls_unique_rows_and_servers_apply_sgd(cluster):
    w0, w1 = cluster.workers
    lr = 0.5
    emb = lt.Embedding(None, 3, worker=w0, name="emb/test", lr=lr, init="uniform", init_a=-1, init_b=1, seed=3)
    ids = torch.tensor([[7, -2], [7, 2**40]])
    start = w1.pull_sparse(emb.table, torch.tensor([7, -2, 2**40])).wait()  # another worker's view
    out = emb(ids)
    assert out.shape == (2, 2, 3)
    assert emb.rows_pulled == 3  # the three unique ids, not four
    torch.testing.assert_close(out[0, 0], start[0], rtol=0, atol=0)
    torch.testing.assert_close(out[1, 0], start[0], rtol=0, atol=0)
    weight = torch.arange(12, dtype=torch.float32).reshape(2, 2, 3)
    (out * weight).sum().backward()
    emb.flush()
    assert emb.rows_pushed == 3
    grad = {7: weight[0, 0] + weight[1, 0], -2: weight[0, 1], 2**40: weight[1, 1]}
    expected = torch.stack([start[i] - lr * grad[k] for i, k in enumerate([7, -2, 2**40])])
    held = w1.pull_sparse(emb.table, torch.tensor([7, -2, 2**40])).wait()
    torch.testing.assert_close(held, expected, rtol=0, atol=1e-6)
    # What the module pulls equals what the servers hold.
    assert torch.equal(emb.pull(torch.tensor([7, -2, 2**40])), held)
    with torch.no_grad():
        emb(ids)  # no backward, no push
    assert emb.rows_pushed == 3


def test_embedding_checks_ids(worker):
    emb = lt.Embedding(10, 2, worker=worker, name="emb/small")
    assert emb(torch.tensor([0, 9])).shape == (2, 2)
    with pytest.raises(layerps.InvalidArgumentError, match=r"\[0, 10\)"):
        emb(torch.tensor([3, 10]))
    with pytest.raises(layerps.InvalidArgumentError, match="integers"):
        emb(torch.tensor([1.0]))
    assert emb(torch.zeros(0, 4, dtype=torch.int64)).shape == (0, 4, 2)


def test_embedding_model_learns_in_process(cluster):
    """Two workers in threads train a tiny model whose only parameters are server rows."""
    def work(w):
        torch.manual_seed(w.rank)
        emb = lt.Embedding(50, 1, worker=w, name="emb/learn", lr=8.0, init="zeros")
        target = (torch.arange(50) % 2).float()
        losses = []
        for step in range(60):
            ids = torch.randint(0, 50, (32,))
            loss = torch.nn.functional.binary_cross_entropy_with_logits(emb(ids).squeeze(1), target[ids])
            loss.backward()
            losses.append(loss.item())
        emb.flush()
        return losses

    for losses in run_parallel(work, [(w,) for w in cluster.workers]):
        assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:5]), losses


def test_a_second_optimizer_of_the_same_name_starts_from_zero_sums(worker):
    p = torch.nn.Parameter(torch.zeros(4))
    for run in range(2):
        opt = lt.DistributedOptimizer(torch.optim.SGD([p], lr=1.0), [("p", p)], worker=worker, name="again",
                                      mode="aggregate")
        for t in range(2):  # leaves sums in two of the three tables
            p.grad = torch.full((4,), float(t + 1))
            opt.synchronize()
            assert torch.equal(p.grad, torch.full((4,), float(t + 1)))
        opt.finish()


def test_embedding_state_dict_pulls_and_assigns_the_servers_rows(cluster):
    w0, w1 = cluster.workers
    e = lt.Embedding(70000, 3, worker=w0, name="sd_src", init="normal", init_b=1.0, seed=5)
    sd = e.state_dict()
    assert list(sd) == ["weight"] and sd["weight"].shape == (70000, 3)  # more than one chunk
    ids = torch.tensor([0, 65535, 65536, 69999])
    assert torch.equal(sd["weight"][ids], e.pull(ids))
    # Loaded into another table from the other worker: the same rows on the servers.
    f = lt.Embedding(70000, 3, worker=w1, name="sd_dst", init="zeros")
    f.load_state_dict(sd)
    assert torch.equal(f.pull(ids), sd["weight"][ids])
    bad = {"weight": torch.zeros(5, 3)}
    with pytest.raises(RuntimeError, match="expected"):
        f.load_state_dict(bad)
    hashed = lt.Embedding(None, 3, worker=w0, name="sd_hashed")
    with pytest.raises(layerps.FailedPreconditionError, match="hashed"):
        hashed.state_dict()


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_embedding_bag_matches_torch_and_the_servers_apply_sgd(worker, mode):
    bag = lt.EmbeddingBag(20, 4, worker=worker, name=f"bag_{mode}", mode=mode, lr=0.5, init="uniform",
                          init_a=-1.0, init_b=1.0, seed=2)
    ref = torch.nn.EmbeddingBag(20, 4, mode=mode)
    with torch.no_grad():
        ref.weight.copy_(bag.state_dict()["weight"])
    inp, off = torch.tensor([3, 7, 7, 19, 0, 3]), torch.tensor([0, 3, 3])  # one empty bag
    out = bag(inp, off)
    assert torch.allclose(out, ref(inp, off), atol=1e-6)
    two_d = torch.tensor([[1, 2], [2, 2]])
    assert torch.allclose(bag(two_d), ref(two_d), atol=1e-6)
    (out * torch.arange(12.0).view(3, 4)).sum().backward()
    bag.flush()
    (ref(inp, off) * torch.arange(12.0).view(3, 4)).sum().backward()
    expected = ref.weight.detach() - 0.5 * ref.weight.grad
    assert torch.allclose(bag.pull(torch.arange(20)), expected, atol=1e-6)
    with pytest.raises(layerps.InvalidArgumentError, match="offsets"):
        bag(inp)
    with pytest.raises(layerps.InvalidArgumentError, match="offsets"):
        bag(inp, torch.tensor([1, 2]))
    with pytest.raises(layerps.InvalidArgumentError, match="mode"):
        lt.EmbeddingBag(5, 2, worker=worker, name="bag_bad", mode="max")


def test_distributed_optimizer_works_with_a_grad_scaler(worker):
    import warnings
    m = torch.nn.Linear(3, 1)
    opt = lt.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), m.named_parameters(),
                                  worker=worker, name="scaler", mode="aggregate")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no CUDA here: the scaler disables itself, with a warning
        scaler = torch.cuda.amp.GradScaler()
    before = m.weight.detach().clone()
    loss = m(torch.ones(2, 3)).sum()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    # One worker: the average gradient is its own (2 per weight), lr 0.1.
    assert torch.allclose(m.weight.detach(), before - 0.2)
    opt.finish()


def test_embedding_with_a_worker_cache_serves_rows_within_the_staleness(cluster):
    """cache_staleness=2: the forward after one backward reuses the rows it pulled (the
    servers' update is not seen); the next one pulls again. With a gradient that does not
    depend on the rows, the servers' values match an uncached table's exactly."""
    w0 = cluster.workers[0]
    kw = dict(worker=w0, lr=0.5, init="zeros")
    cached = lt.Embedding(None, 4, name="emb/cached", cache_rows=100, cache_staleness=2, **kw)
    plain = lt.Embedding(None, 4, name="emb/plain", **kw)
    ids = torch.tensor([[3, 9], [9, 27]])
    coef = torch.tensor([1.0, -2.0, 0.5, 3.0])
    outs_c, outs_p = [], []
    hits0 = w0.stats()["cache_hits"]
    for _ in range(3):
        for emb, outs in ((cached, outs_c), (plain, outs_p)):
            y = emb(ids)
            outs.append(y.detach().clone())
            (y * coef).sum().backward()
        cached.flush()
        plain.flush()
    torch.testing.assert_close(outs_c[0], outs_p[0], rtol=0, atol=0)
    torch.testing.assert_close(outs_c[1], outs_c[0], rtol=0, atol=0)   # from the cache
    assert not torch.equal(outs_p[1], outs_p[0])                        # the servers moved
    torch.testing.assert_close(outs_c[2], outs_p[2], rtol=0, atol=0)   # pulled again
    assert w0.stats()["cache_hits"] - hits0 == 3  # the 3 unique ids, once
    with pytest.raises(layerps.InvalidArgumentError):
        w0.declare_sparse("bad-cache", 4, cache_rows=10)
