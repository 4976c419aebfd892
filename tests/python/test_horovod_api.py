"""Horovod's torch API in layerps.torch, on the C++ typed collectives: values against
references computed here, async handles, grouped calls, gathers and all-to-all with
uneven sizes, objects, join with uneven steps against a one-process emulation of
Horovod's join, mismatches failing every member alike, and bad input."""

import numpy as np
import pytest
import torch

import layerps
import layerps.torch as hvd
from layerps import collectives as C
from conftest import FAST, run_parallel

W = 3


@pytest.fixture(scope="module")
def cluster():
    with layerps.LocalCluster(num_servers=1, num_workers=W, transport="inproc", **FAST) as c:
        yield c


def every(cluster, fn):
    """fn(rank, worker) on every worker at once; the results by rank."""
    return run_parallel(fn, [(w.rank, w) for w in cluster.workers], timeout=120)


def value(rank, n, dtype):
    return (torch.arange(n) % 7 - 3 + rank).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16,
                                   torch.int32, torch.int64, torch.uint8])
def test_allreduce_ops_and_types(cluster, dtype):
    n = 101

    def work(r, w):
        x = value(r, n, dtype).abs() if dtype == torch.uint8 else value(r, n, dtype)
        out = {}
        for name, op in (("sum", hvd.Sum), ("min", hvd.Min), ("max", hvd.Max)):
            out[name] = hvd.allreduce(x, op=op, worker=w)
        if dtype.is_floating_point:
            out["avg"] = hvd.allreduce(x, worker=w)  # Average, Horovod's default
        return x, out

    res = run_parallel(work, [(w.rank, w) for w in cluster.workers])
    xs = torch.stack([x.to(torch.float64) for x, _ in res])
    for _, out in res:
        assert torch.equal(out["sum"].to(torch.float64), xs.sum(0).to(dtype).to(torch.float64))
        assert torch.equal(out["min"].to(torch.float64), xs.min(0).values)
        assert torch.equal(out["max"].to(torch.float64), xs.max(0).values)
        if "avg" in out:
            torch.testing.assert_close(out["avg"].to(torch.float64), xs.mean(0), rtol=1e-2, atol=1e-2)
        assert out["sum"].dtype == dtype
    # Every member holds the same bytes.
    for _, out in res[1:]:
        assert torch.equal(out["sum"], res[0][1]["sum"])


def test_async_inplace_grouped_scales_and_compression(cluster):
    def work(r, w):
        a = torch.full((1000,), float(r + 1))
        h = hvd.allreduce_async_(a, op=hvd.Sum, worker=w)
        b = [torch.full((5,), r, dtype=torch.int64), torch.full((3, 2), 0.5 * r)]
        g = hvd.grouped_allreduce(b, op=hvd.Sum, worker=w)
        s = hvd.allreduce(torch.ones(4), op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5, worker=w)
        c = hvd.allreduce(torch.full((10000,), 0.1 * (r + 1)), op=hvd.Sum,
                          compression=hvd.Compression.fp16, worker=w)
        done_before = hvd.poll(h)
        got = hvd.synchronize(h)
        return a, got is a, g, s, c, done_before

    res = every(cluster, work)
    for a, same, g, s, c, _ in res:
        assert same and torch.equal(a, torch.full((1000,), 6.0))
        assert torch.equal(g[0], torch.full((5,), 3, dtype=torch.int64))
        assert torch.equal(g[1], torch.full((3, 2), 1.5))
        assert torch.equal(s, torch.full((4,), 3.0))
        torch.testing.assert_close(c, torch.full((10000,), 0.6), rtol=2e-3, atol=2e-3)
        assert torch.equal(c, res[0][4])  # compressed: the same bits everywhere


def test_non_contiguous_tensors_are_reduced_and_broadcast_in_place(cluster):
    # A transposed view goes to the core as a contiguous copy; the result is written back
    # into the caller's view (and through it, its base).
    def work(r, w):
        base = torch.arange(12, dtype=torch.float32).reshape(3, 4) + r
        view = base.t()
        got = C.allreduce(view, worker=w)
        bf = (torch.arange(6, dtype=torch.float32).reshape(2, 3) * (r + 1)).to(torch.bfloat16).t()
        C.broadcast(bf, 1, worker=w)
        return base, got is view, bf

    ranks = sum(range(W))
    for base, same, bf in every(cluster, work):
        assert same and torch.equal(base, W * torch.arange(12.0).reshape(3, 4) + ranks)
        assert torch.equal(bf.float(), (2 * torch.arange(6.0).reshape(2, 3)).t())


def test_allgather_broadcast_alltoall_and_objects(cluster):
    def work(r, w):
        gathered = hvd.allgather(torch.full((r + 1, 2), r, dtype=torch.int32), worker=w)
        b = torch.full((7,), float(r))
        copy = hvd.broadcast(b, 2, worker=w)
        hvd.broadcast_(b, 1, worker=w)
        splits = [(r + q) % 3 for q in range(W)]
        rows = torch.cat([torch.full((s, 3), 10.0 * r + q) for q, s in enumerate(splits)])
        got, got_splits = hvd.alltoall(rows, splits=splits, worker=w)
        even = hvd.alltoall(torch.arange(W * 2, dtype=torch.float64) + 100 * r, worker=w)
        obj = hvd.broadcast_object({"rank": r, "lr": [0.1, r]}, root_rank=0, worker=w)
        objs = hvd.allgather_object(("hello", r), worker=w)
        return gathered, copy, b, got, got_splits, even, obj, objs

    res = every(cluster, work)
    for r, (gathered, copy, b, got, got_splits, even, obj, objs) in enumerate(res):
        want = torch.cat([torch.full((q + 1, 2), q, dtype=torch.int32) for q in range(W)])
        assert torch.equal(gathered, want)
        assert torch.equal(copy, torch.full((7,), 2.0))
        assert torch.equal(b, torch.full((7,), 1.0))
        assert got_splits.tolist() == [(q + r) % 3 for q in range(W)]
        assert torch.equal(got, torch.cat([torch.full(((q + r) % 3, 3), 10.0 * q + r) for q in range(W)]))
        assert even.tolist() == [float(100 * q + 2 * r + i) for q in range(W) for i in range(2)]
        assert obj == {"rank": 0, "lr": [0.1, 0]}
        assert objs == [("hello", q) for q in range(W)]


def test_join_with_uneven_steps_equals_horovods(cluster):
    """Rank r averages steps[r] metrics then joins: the joined contribute zeros and the
    average stays divided by W, as in Horovod; join() names the last rank to join."""
    steps = [4, 2, 1]

    def work(r, w):
        seen = [hvd.allreduce(torch.tensor([float(10 * r + k)]), worker=w).item() for k in range(steps[r])]
        return seen, hvd.join(worker=w, timeout=60)

    res = every(cluster, work)
    for r, (seen, last) in enumerate(res):
        assert last == 0
        for k, v in enumerate(seen):
            want = sum(10 * q + k for q in range(W) if steps[q] > k) / W
            assert v == pytest.approx(want), (r, k)


def test_mismatch_and_bad_input(cluster):
    def work(r, w):
        try:
            hvd.allreduce(torch.ones(5 if r != 1 else 6), name="grad", worker=w)
        except layerps.InvalidArgumentError as e:
            return str(e)
        return "no error"

    msgs = every(cluster, work)
    assert len(set(msgs)) == 1 and "count differs" in msgs[0] and "'grad'" in msgs[0], msgs
    w = cluster.workers[0]
    with pytest.raises(layerps.InvalidArgumentError, match="unsupported tensor dtype"):
        hvd.allreduce(torch.ones(3, dtype=torch.complex64), worker=w)
    with pytest.raises(layerps.InvalidArgumentError, match="op must be"):
        hvd.allreduce(torch.ones(3), op="median", worker=w)
    with pytest.raises(layerps.InvalidArgumentError, match="average= or op="):
        hvd.allreduce(torch.ones(3), average=True, op=hvd.Sum, worker=w)
    with pytest.raises(layerps.InvalidArgumentError, match="root rank"):
        hvd.broadcast_parameters([torch.ones(2)], w)
    with pytest.raises(layerps.InvalidArgumentError, match="process set"):
        hvd.allreduce(torch.ones(3), process_set=hvd.ProcessSet([1, 2]), worker=w)
    # Nothing was sent: the set still pairs up.
    out = every(cluster, lambda r, w: hvd.allreduce(torch.ones(2), op=hvd.Sum, worker=w))
    assert all(torch.equal(o, torch.full((2,), float(W))) for o in out)


def _outcome(call):
    """What a collective call gave: ('raised', class name, message) or ('returned', result)."""
    try:
        return ("returned", call())
    except layerps.LayerPSError as e:
        return ("raised", type(e).__name__, str(e))


@pytest.mark.parametrize("x, out, names", [
    (np.ones(8, np.float32), np.zeros(8, np.int32), ("int32", "float32")),
    (np.ones(8, np.float64), np.zeros(8, np.int64), ("int64", "float64")),
    (np.ones(8, np.int32), np.zeros(8, np.float32), ("float32", "int32")),
    (torch.ones(8), torch.zeros(8, dtype=torch.int32), ("int32", "float32")),
    (torch.ones(8, dtype=torch.bfloat16), torch.zeros(8, dtype=torch.float16), ("float16", "bfloat16")),
    (torch.ones(8, dtype=torch.float16), torch.zeros(8, dtype=torch.bfloat16), ("bfloat16", "float16")),
], ids=["f32-i32", "f64-i64", "i32-f32", "torch-f32-i32", "torch-bf16-f16", "torch-f16-bf16"])
def test_an_output_of_another_dtype_is_an_error(cluster, x, out, names):
    # Every member calls (so that the collective would complete were it accepted): each
    # must refuse it, naming both dtypes, and leave `out` untouched.
    def work(r, w):
        mine = out.clone() if isinstance(out, torch.Tensor) else out.copy()
        return _outcome(lambda: C.allreduce(x, out=mine, worker=w)), mine

    for (outcome, mine) in every(cluster, work):
        assert outcome[:2] == ("raised", "InvalidArgumentError"), (outcome, mine)
        got, want = names
        assert f"output's dtype {got} differs from the input's {want}" in outcome[2], outcome
        assert not mine.any()  # nothing written (no reinterpreted bits)


def test_grouped_outputs_of_another_dtype_and_outputs_of_another_shape_are_errors(cluster):
    def grouped(r, w):
        outs = [np.zeros(4, np.float32), np.zeros(4, np.int32)]
        return _outcome(lambda: C.grouped_allreduce([np.ones(4, np.float32), np.ones(4, np.float32)],
                                                    outs=outs, worker=w)), outs

    for (outcome, outs) in every(cluster, grouped):
        assert outcome[:2] == ("raised", "InvalidArgumentError"), (outcome, outs)
        assert "tensor 1: the output's dtype int32 differs from the input's float32" in outcome[2], outcome
        assert not outs[1].any()

    def shape(r, w):
        return _outcome(lambda: C.allreduce(np.ones((2, 4), np.float32), out=np.zeros(8, np.float32), worker=w))

    for outcome in every(cluster, shape):
        assert outcome[:2] == ("raised", "InvalidArgumentError"), outcome
        assert "the output's shape (8,) differs from the input's (2, 4)" in outcome[2], outcome
    # Nothing was sent: the set still pairs up.
    res = every(cluster, lambda r, w: C.allreduce(np.ones(3, np.int32), out=np.zeros(3, np.int32), worker=w))
    assert all((o == W).all() for o in res)


def test_rank_arguments_out_of_range_are_invalid_arguments(cluster):
    w = cluster.workers[0]
    x = np.ones(4, np.float32)
    for root in (-1, W, 2**40):
        with pytest.raises(layerps.InvalidArgumentError, match=rf"broadcast: root {root} is not a worker rank "
                                                               rf"\(valid: 0\.\.{W - 1}\)"):
            C.broadcast(x, root, worker=w)
    with pytest.raises(layerps.InvalidArgumentError, match=r"root -1 is not a worker rank"):
        hvd.broadcast(torch.ones(4), root_rank=-1, worker=w)
    with pytest.raises(layerps.InvalidArgumentError, match=r"process set: rank -1 is not a worker rank"):
        C.allreduce(x, process_set=[0, -1], worker=w)
    # Nothing was sent: the set still pairs up.
    res = every(cluster, lambda r, w: C.broadcast(np.full(2, float(r), np.float32), 2, worker=w))
    assert all((o == 2).all() for o in res)


def test_process_set_and_numpy(cluster):
    def work(r, w):
        ps = hvd.ProcessSet([0, 2])
        if not ps.included(w):
            return None
        return C.allreduce(np.full(4, r + 1, dtype=np.int64), op=C.Product, process_set=ps, worker=w)

    res = every(cluster, work)
    assert res[1] is None
    assert res[0].tolist() == [3, 3, 3, 3] and res[2].tolist() == [3, 3, 3, 3]


def emulate(size):
    """One process doing what Horovod's join means for launched_horovod.py: at step k the
    workers with a k-th batch average their gradients over `size` (the joined contribute
    zeros), and every active worker applies the same step."""
    import launched_horovod as script
    model = script.make_model()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    shards = [script.shard(r, size) for r in range(size)]
    losses = []
    for k in range(len(shards[0])):
        grads = [torch.zeros_like(p) for p in model.parameters()]
        total = 0.0
        for r in range(size):
            if k >= len(shards[r]):
                continue
            x, y = shards[r][k]
            model.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            total += loss.item()
            for g, p in zip(grads, model.parameters()):
                g += p.grad
        for g, p in zip(grads, model.parameters()):
            p.grad = g / size
        opt.step()
        sched.step()
        losses.append(total / size)
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]), losses


@pytest.mark.parametrize("workers,args", [(2, []), (3, []), (3, ["--horovod-args"])])
def test_horovod_script_under_the_launcher_equals_one_process(workers, args):
    """The default DistributedOptimizer (hybrid: dense gradients by the all-reduce at
    step()) and, with Horovod's arguments, mode 'horovod' (all-reduces from hooks)."""
    import json
    from conftest import run_launched
    p = run_launched(["-s", "1", "-w", str(workers), "--timeout_s=150", "--",
                      __import__("sys").executable, "launched_horovod.py", *args], timeout=200)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    line = [l for l in p.stdout.splitlines() if "RESULT " in l]
    assert line, p.stdout[-3000:]
    got = json.loads(line[0].split("RESULT ", 1)[1])
    want_params, want_losses = emulate(workers)
    torch.testing.assert_close(torch.tensor(got["params"]), want_params, rtol=1e-4, atol=1e-5)
    assert got["losses"] == pytest.approx(want_losses, rel=1e-4, abs=1e-6)
    assert got["last"] == 0  # rank 0 has the most batches


@pytest.mark.parametrize("kwargs", [dict(op=hvd.Average), dict(compression=hvd.Compression.fp16),
                                    dict(gradient_predivide_factor=2.0), dict(op=hvd.Average, overlap=False)])
def test_distributed_optimizer_horovod_mode_equals_one_process(cluster, kwargs):
    """Horovod's arguments select Horovod's mode: each gradient all-reduced (Average) from
    its hook during backward; Adam then steps. Equal to one process averaging the W
    gradients (fp16 on the wire: within its rounding)."""
    def data(r):
        g = torch.Generator().manual_seed(7 + r)
        return torch.randn(16, 6, generator=g), torch.randn(16, 2, generator=g)

    def build():
        return torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.ReLU(), torch.nn.Linear(10, 2))

    # The initial weights, made here: torch's global generator is shared by the worker
    # threads, whose own initializations would interleave.
    torch.manual_seed(3)
    init = {k: v.clone() for k, v in build().state_dict().items()}

    def work(r, w):
        model = build()
        model.load_state_dict(init)
        opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.05),
                                       named_parameters=model.named_parameters(), worker=w, **kwargs)
        assert opt.mode == "horovod"
        x, y = data(r)
        for _ in range(3):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        return [p.detach().clone() for p in model.parameters()], opt.hook_allreduces

    res = every(cluster, work)
    ref = build()
    ref.load_state_dict(init)
    opt = torch.optim.Adam(ref.parameters(), lr=0.05)
    for _ in range(3):
        grads = [torch.zeros_like(p) for p in ref.parameters()]
        for r in range(W):
            ref.zero_grad()
            x, y = data(r)
            torch.nn.functional.mse_loss(ref(x), y).backward()
            for g, p in zip(grads, ref.parameters()):
                g += p.grad
        for g, p in zip(grads, ref.parameters()):
            p.grad = g / W
        opt.step()
    tol = 3e-3 if "compression" in kwargs else 1e-5
    for params, hooks in res:
        for got, want in zip(params, ref.parameters()):
            torch.testing.assert_close(got, want.detach(), rtol=tol, atol=tol)
        assert hooks == (0 if kwargs.get("overlap") is False else 3 * 4)  # 4 parameters, 3 steps
    with pytest.raises(layerps.InvalidArgumentError, match="belong to mode 'horovod'"):
        hvd.DistributedOptimizer(torch.optim.SGD(build().parameters(), lr=0.1), mode="ps", op=hvd.Sum,
                                 worker=cluster.workers[0])
