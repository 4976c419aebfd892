"""A DDP script (test_ddp.py) under torchrun: the same model, data and optimizer with the
gradient exchange of argv[1]: 'gloo' (DDP's own all-reduce over gloo), 'backend' (DDP's
own over the "layerps" backend), 'allreduce', 'fp16' or 'ps' (layerps.torch.hooks). Prints one JSON line per rank: the losses of every
step and the final parameters' sum and a few values. DDP_BUCKET_CAP_MB ("a,b"): each
rank's bucket_cap_mb, to make their buckets differ."""
import json
import os
import sys

import torch
import torch.distributed as dist

import layerps
from layerps.torch import hooks

comm = sys.argv[1]
if comm == "backend":
    import layerps.torch  # noqa: F401 (registers the backend; it starts the LayerPS worker)
dist.init_process_group("layerps" if comm == "backend" else "gloo")
rank, world = dist.get_rank(), dist.get_world_size()
if comm not in ("gloo", "backend"):
    w = layerps.init()
    assert (w.rank, w.num_workers) == (rank, world), (w.rank, w.num_workers, rank, world)
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                          torch.nn.Linear(64, 1))
caps = os.environ.get("DDP_BUCKET_CAP_MB")
cap = float(caps.split(",")[rank]) if caps else 0.005  # a few buckets of ~1300 values
model = torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=cap)
if comm == "allreduce":
    model.register_comm_hook(None, hooks.allreduce_hook)
elif comm == "fp16":
    model.register_comm_hook(None, hooks.fp16_compress_hook)
elif comm == "ps":
    model.register_comm_hook(hooks.PSHookState(), hooks.ps_hook)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
g = torch.Generator().manual_seed(1)
true_w = torch.randn(20, 1, generator=g)
losses = []
error = None
try:
    for step in range(30):
        x = torch.randn(world * 16, 20, generator=g)
        y = torch.tanh(x @ true_w)
        xs, ys = x[rank * 16:(rank + 1) * 16], y[rank * 16:(rank + 1) * 16]
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(xs), ys)
        loss.backward()
        opt.step()
        losses.append(loss.item())
except Exception as e:  # the bad-input case: the hook's error, as DDP raises it
    error = f"{type(e).__name__}: {e}"
flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
print("DDP " + json.dumps({"rank": rank, "comm": comm, "losses": losses, "sum": flat.sum().item(),
                           "head": flat[:5].tolist(), "error": error}), flush=True)
if comm not in ("gloo", "backend"):
    layerps.shutdown()  # (the backend stops the worker it started at exit)
dist.destroy_process_group()
