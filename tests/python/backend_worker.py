"""One rank of test_ddp.py's store-rendezvous case: torch.distributed on the "layerps"
backend with MASTER_ADDR/MASTER_PORT only (no launcher: the backend starts LayerPS through
torch's store). argv: rank, world size. Checks each collective's values."""
import sys

import torch
import torch.distributed as dist

import layerps.torch  # noqa: F401 (registers the backend)

rank, world = int(sys.argv[1]), int(sys.argv[2])
dist.init_process_group("layerps", rank=rank, world_size=world)
assert dist.get_backend() == "layerps", dist.get_backend()

t = torch.full((5,), float(rank + 1))
dist.all_reduce(t)
assert torch.equal(t, torch.full((5,), float(sum(range(1, world + 1))))), t
t = torch.full((3,), float(rank + 2))
dist.all_reduce(t, op=dist.ReduceOp.MAX)
assert torch.equal(t, torch.full((3,), float(world + 1))), t
i = torch.tensor([rank + 1], dtype=torch.int64)
dist.all_reduce(i, op=dist.ReduceOp.PRODUCT)
assert i.item() == torch.arange(1, world + 1).prod().item(), i

b = torch.arange(4, dtype=torch.float32) * (rank + 1)
dist.broadcast(b, src=world - 1)
assert torch.equal(b, torch.arange(4, dtype=torch.float32) * world), b

outs = [torch.zeros(2, 2) for _ in range(world)]
dist.all_gather(outs, torch.full((2, 2), float(rank)))
assert all(torch.equal(o, torch.full((2, 2), float(r))) for r, o in enumerate(outs)), outs

mine = torch.zeros(2)
dist.reduce_scatter(mine, [torch.full((2,), float(rank + r)) for r in range(world)])
assert torch.equal(mine, torch.full((2,), float(sum(q + rank for q in range(world))))), mine

objs = [None] * world
dist.all_gather_object(objs, {"rank": rank})
assert objs == [{"rank": r} for r in range(world)], objs

sub = dist.new_group([0, world - 1])
if rank in (0, world - 1):
    s = torch.ones(1)
    dist.all_reduce(s, group=sub)
    assert s.item() == 2.0, s
dist.barrier()
try:
    dist.send(torch.ones(1), dst=(rank + 1) % world)
    raise AssertionError("send should not be offered")
except NotImplementedError as e:
    assert "layerps backend: send is not offered" in str(e), e
print(f"BACKEND rank {rank} ok", flush=True)
dist.destroy_process_group()
