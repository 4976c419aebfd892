"""CUDA tensors through the device route (docs/cuda.md, "From Python"): push/pull and
push_sparse/pull_sparse with tensors in GPU memory equal the host route, with no copy to
the host in Python. The GPU cases run where torch sees a GPU and LayerPS was built with
CUDA, and are skipped with the reason elsewhere; without a GPU, the core's device calls
fail with FailedPreconditionError saying why."""
import numpy as np
import pytest
import torch

import layerps
from layerps.errors import FailedPreconditionError

HAVE_GPU = torch.cuda.is_available() and layerps.Worker.device_support()
needs_gpu = pytest.mark.skipif(
    not HAVE_GPU, reason=("no CUDA device visible to torch" if not torch.cuda.is_available()
                          else "LayerPS was built without CUDA or sees no device"))


@pytest.mark.skipif(HAVE_GPU, reason="a GPU is usable here: the GPU cases cover the device route")
def test_device_calls_fail_cleanly_without_a_gpu(worker):
    d = worker.declare_dense("d", 8)
    s = worker.declare_sparse("s", 2)
    calls = [lambda: worker._node.push_device(d.id, 0, 8, 0, None),
             lambda: worker._node.pull_device(d.id, 0, 8, 0, None),
             lambda: worker._node.push_sparse_device(s.id, 0, 2, 0, 4, 0, None),
             lambda: worker._node.pull_sparse_device(s.id, 0, 2, 0, 4, 0, None)]
    for call in calls:
        with pytest.raises(FailedPreconditionError, match="CUDA"):
            call().wait(10)
    assert np.array_equal(worker.pull(d).wait(10), np.zeros(8, np.float32))  # nothing pushed


@needs_gpu
@pytest.mark.gpu
def test_dense_push_pull_of_cuda_tensors_equal_the_host_route(worker):
    t = worker.declare_dense("dev", 1003)
    g = torch.arange(1003, dtype=torch.float32, device="cuda") - 500
    worker.push(t, g).wait(30)
    worker.push(t, g).wait(30)
    out = torch.full((1003,), float("nan"), device="cuda")
    assert worker.pull(t, out).wait(30) is out
    torch.cuda.current_stream().synchronize()
    assert torch.equal(out.cpu(), 2 * g.cpu())
    assert np.array_equal(worker.pull(t).wait(30), 2 * g.cpu().numpy())


@needs_gpu
@pytest.mark.gpu
def test_sparse_push_pull_of_cuda_tensors_equal_the_host_route(worker):
    t = worker.declare_sparse("dev_s", 4)
    keys = torch.tensor([5, 9, 5, 1 << 40, 9], dtype=torch.int64, device="cuda")
    rows = torch.arange(20, dtype=torch.float32, device="cuda").reshape(5, 4)
    worker.push_sparse(t, keys, rows).wait(30)
    out = worker.pull_sparse(t, keys).wait(30)
    assert out.is_cuda
    torch.cuda.current_stream().synchronize()
    host = worker.pull_sparse(t, keys.cpu()).wait(30)
    assert torch.equal(out.cpu(), host)
    assert torch.equal(host[0], rows[0].cpu() + rows[2].cpu())


@pytest.mark.skipif(HAVE_GPU, reason="a GPU is usable here: the GPU cases cover the device route")
def test_pinned_staging_and_the_many_device_calls_fail_cleanly_without_a_gpu(worker):
    # The core's pinned staging (ps::PinnedStage), which the calls without a device
    # variant of their own use for CUDA tensors, says why it cannot run.
    s = worker.declare_sparse("s_many", 2)
    with pytest.raises(FailedPreconditionError, match="CUDA"):
        layerps._core.PinnedStage.allocate(16)
    with pytest.raises(FailedPreconditionError, match="CUDA"):
        layerps._core.PinnedStage.from_device(0, 16, 0)
    with pytest.raises(FailedPreconditionError, match="CUDA"):
        layerps._core.copy_host_to_device(np.zeros(4, np.float32), 0, 0)
    for call in (worker._node.push_sparse_many_device, worker._node.pull_sparse_many_device):
        with pytest.raises(FailedPreconditionError, match="CUDA"):
            call([(s.id, 0, 2, 0, 4)], 0, None).wait(10)


@needs_gpu
@pytest.mark.gpu
def test_calls_without_a_device_variant_stage_cuda_tensors_in_the_pinned_pool(worker):
    # pushpull, assign, assign_sparse and the *_many calls take CUDA tensors; results
    # come back on the GPU, equal to the host route.
    d = worker.declare_dense("staged_d", 1001)
    g = torch.linspace(-1, 1, 1001, device="cuda")
    worker.assign(d, g).wait(30)
    out = torch.empty(1001, device="cuda")
    assert worker.pushpull(d, g, out).wait(30) is out
    torch.cuda.current_stream().synchronize()
    assert torch.equal(out.cpu(), 2 * g.cpu())
    s1, s2 = worker.declare_sparse("staged_s1", 3), worker.declare_sparse("staged_s2", 5)
    k1 = torch.tensor([1, 7, 1], device="cuda")
    k2 = torch.tensor([2, 3], device="cuda")
    r1 = torch.arange(9, dtype=torch.float32, device="cuda").reshape(3, 3)
    r2 = torch.ones(2, 5, device="cuda")
    worker.assign_sparse(s1, k1[:2], r1[:2]).wait(30)
    worker.push_sparse_many([(s1, k1, r1), (s2, k2, r2)]).wait(30)
    a, b = worker.pull_sparse_many([(s1, k1), (s2, k2)]).wait(30)
    assert a.is_cuda and b.is_cuda
    torch.cuda.current_stream().synchronize()
    host_a, host_b = worker.pull_sparse_many([(s1, k1.cpu()), (s2, k2.cpu())]).wait(30)
    assert torch.equal(a.cpu(), host_a) and torch.equal(b.cpu(), host_b)
    assert torch.equal(host_a[0], r1[0].cpu() + r1[0].cpu() + r1[2].cpu())  # assigned, then pushed twice


@needs_gpu
@pytest.mark.gpu
def test_collectives_of_cuda_tensors_return_cuda_tensors_equal_to_the_host_route(cluster):
    from layerps import collectives as C

    def work(r, w):
        x = torch.arange(12, dtype=torch.float32, device="cuda") + r
        got = C.allreduce(x.clone(), worker=w)
        assert got.is_cuda and torch.equal(got.cpu(), C.allreduce(x.cpu(), worker=w))
        out = torch.empty_like(x)
        assert C.allreduce(x, out, op=C.Average, worker=w) is out
        assert torch.equal(out.cpu(), (2 * torch.arange(12.0) + 1) / 2)
        half = x.to(torch.bfloat16)
        assert torch.equal(C.allreduce(half.clone(), worker=w).cpu(), C.allreduce(half.cpu(), worker=w))
        gathered = C.allgather(x[: 3 + r].reshape(-1, 1), worker=w)
        assert gathered.is_cuda and gathered.shape == (7, 1)
        b = x.clone()
        C.broadcast(b, 1, worker=w)
        assert torch.equal(b.cpu(), torch.arange(12.0) + 1)
        rows, counts = C.alltoall(x.reshape(6, 2), worker=w)
        assert rows.is_cuda and counts.tolist() == [3, 3]
        rows_v, counts_v = C.alltoall(x.reshape(6, 2), splits=[1 + r, 5 - r], worker=w)
        assert rows_v.is_cuda and int(counts_v.sum()) == rows_v.shape[0]
        block = C.reducescatter(x, worker=w)
        assert block.is_cuda and torch.equal(block.cpu(), C.reducescatter(x.cpu(), worker=w))

    from conftest import on_every_worker
    assert on_every_worker(cluster.workers, work) == {}


@needs_gpu
@pytest.mark.gpu
def test_embedding_modules_train_cuda_ids_on_the_device_route(cluster):
    import layerps.torch as lt

    def work(r, w):
        emb = lt.EmbeddingBag(100, 4, mode="sum", name="gpu_bag", worker=w, lr=0.5, init="zeros")
        ids = torch.tensor([[1, 2, 3], [3, 4, 99]], device="cuda")
        out = emb(ids)
        assert out.is_cuda and out.shape == (2, 4)
        out.sum().backward()
        emb.flush()
        w.barrier("workers", 30)
        rows = emb.pull(torch.tensor([3, 5], device="cuda"))
        assert rows.is_cuda
        # id 3 is in both bags of both workers: four unit gradients at lr 0.5.
        assert torch.equal(rows.cpu(), torch.tensor([[-2.0] * 4, [0.0] * 4]))

    from conftest import on_every_worker
    assert on_every_worker(cluster.workers, work) == {}


def _train(w, mode, device, steps=3):
    import layerps.torch as lt
    torch.manual_seed(3)
    m = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2)).to(device)
    opt = lt.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), m.named_parameters(), worker=w,
                                  name=f"gpu_{mode}_{device}", mode=mode)
    for t in range(steps):
        g = torch.Generator().manual_seed(100 * w.rank + t)
        x, y = torch.randn(8, 6, generator=g).to(device), torch.randn(8, 2, generator=g).to(device)
        opt.zero_grad()
        torch.nn.functional.mse_loss(m(x), y).backward()
        opt.step()
    opt.finish()
    return [p.detach().cpu() for p in m.parameters()]


@needs_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["hybrid", "ps", "allreduce", "horovod", "aggregate", "server"])
def test_distributed_optimizer_trains_a_cuda_model_as_a_cpu_model(cluster, mode):
    results = {}

    def work(r, w):
        results[(r, "cuda")] = _train(w, mode, "cuda")
        results[(r, "cpu")] = _train(w, mode, "cpu")

    from conftest import on_every_worker
    assert on_every_worker(cluster.workers, work) == {}
    for r in range(2):
        for a, b in zip(results[(r, "cuda")], results[(r, "cpu")]):
            assert torch.allclose(a, b, atol=1e-5), (mode, r)
