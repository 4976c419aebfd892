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
