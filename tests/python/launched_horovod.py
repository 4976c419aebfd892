"""A Horovod training script with only its import changed (run by test_horovod_api.py
under layerps-launch): uneven shards, join, Adam, StepLR, metric averaging with
hvd.allreduce, broadcast_parameters / broadcast_optimizer_state / broadcast_object.
Rank 0 prints its final parameters and averaged losses as JSON."""

import json
import sys

import torch

import layerps.torch as hvd  # was: import horovod.torch as hvd


def shard(rank, size):
    """Rank r's batches: 6 - 2r of them (uneven), deterministic."""
    g = torch.Generator().manual_seed(100 + rank)
    n = max(6 - 2 * rank, 1)
    return [(torch.randn(4, 8, generator=g), torch.randn(4, 1, generator=g)) for _ in range(n)]


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


if __name__ == "__main__":
    hvd.init()
    model = make_model()
    if hvd.rank() != 0:
        for p in model.parameters():
            p.data.add_(1.0)  # overwritten by the broadcast below
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    if "--horovod-args" in sys.argv:  # Horovod's arguments: all-reduces started from hooks
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                       compression=hvd.Compression.none, op=hvd.Average)
        assert opt.mode == "horovod"
    else:
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    config = hvd.broadcast_object({"loss": "mse"} if hvd.rank() == 0 else None, root_rank=0)
    assert config == {"loss": "mse"}
    losses = []
    for x, y in shard(hvd.rank(), hvd.size()):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(hvd.allreduce(loss.detach(), name="loss").item())
    last = hvd.join()
    if hvd.rank() == 0:
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()
        print("RESULT " + json.dumps({"params": flat, "losses": losses, "last": last}), flush=True)
    hvd.shutdown()
