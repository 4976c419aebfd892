"""The torch.distributed backend ``"layerps"``: ``torch.distributed.init_process_group(
backend="layerps")`` runs torch's collectives on LayerPS's typed collectives, so a DDP
script (or any script written against torch.distributed) runs unchanged on LayerPS.
Registered when ``layerps.torch`` is imported.

The backend needs a LayerPS worker in the process. It uses the one ``layerps.init()``
started; otherwise it starts it: under layerps-launch, torchrun, Slurm or mpirun as
``layerps.init()`` does (docs/launch.md), else through torch's rendezvous store (rank 0
hosts the scheduler and LAYERPS_NUM_SERVERS servers, default 1, and publishes their
address in the store; the others join). It stops it at exit. Groups made with
``new_group`` run on the process set of their members' LayerPS ranks.

Offered: all_reduce (SUM, AVG where torch has it, PRODUCT, MIN, MAX; not the bitwise ops),
broadcast, all_gather (and the flat ``_allgather_base``), reduce_scatter, reduce, gather,
scatter, barrier, coalesced all-reduce. Not offered (NotImplementedError naming the call):
send/recv, all_to_all.

Completion: torch 1.13's process groups written in Python cannot complete a work object
later, so each call runs its LayerPS collective to the end before it returns, and returns
a work that is already complete (from a one-member gloo group of this process: its result
is the call's tensors). DDP's buckets then do not overlap backward; the communication hooks
(:mod:`layerps.torch.hooks`) do.
"""

import atexit
import os

import torch
import torch.distributed as dist

from .. import cluster
from .. import collectives as C
from ..errors import InvalidArgumentError

NAME = "layerps"

_OPS = {}
for _torch_name, _ours in (("SUM", C.Sum), ("AVG", C.Average), ("PRODUCT", C.Product), ("MIN", C.Min),
                           ("MAX", C.Max)):
    if hasattr(dist.ReduceOp, _torch_name):
        _OPS[_torch_name] = (getattr(dist.ReduceOp, _torch_name), _ours)


def _op_of(reduce_op, what):
    for name, (torch_op, ours) in _OPS.items():
        if reduce_op == torch_op:
            return ours
    raise NotImplementedError(f"layerps backend: {what} with {reduce_op} is not offered "
                              f"(ops: {', '.join(_OPS)})")


_completed = None


def _done(tensors=None):
    """A work object that is complete (its future's value: `tensors`)."""
    global _completed
    if _completed is None:
        from torch._C._distributed_c10d import ProcessGroupGloo  # noqa: PLC0415
        opts = ProcessGroupGloo._Options()
        opts._devices = [ProcessGroupGloo.create_device(hostname="127.0.0.1")]
        opts._threads = 1
        _completed = ProcessGroupGloo(dist.HashStore(), 0, 1, opts)
    # One member: the all-reduce of `tensors` is the identity; a barrier when there are none.
    return _completed.allreduce(tensors) if tensors else _completed.barrier()


class ProcessGroupLayerPS(dist.ProcessGroup):
    """torch's process group over a LayerPS worker: group rank r is LayerPS worker rank
    ``ranks[r]``."""

    def __init__(self, worker, rank, size, ranks, timeout):
        super().__init__(rank, size)
        self.worker = worker
        self.ranks = list(ranks)
        self.sorted = sorted(self.ranks)  # LayerPS's order of the members (gathers' rows)
        self.set = C.ProcessSet(self.ranks) if len(set(self.ranks)) != worker.num_workers else None
        self.timeout = timeout.total_seconds() if timeout is not None else None
        self.seq = 0

    def getBackendName(self):  # noqa: N802 (torch's name)
        return NAME

    def _kw(self, what):
        self.seq += 1
        return dict(process_set=self.set, worker=self.worker, timeout=self.timeout, name=f"torch.{what}")

    def _row(self, group_rank):
        """Where group rank r's contribution sits in a gather (LayerPS rank order)."""
        return self.sorted.index(self.ranks[group_rank])

    @staticmethod
    def _dense(t, what):
        if t.is_sparse:
            raise NotImplementedError(f"layerps backend: {what} of a sparse tensor is not offered")
        return t

    def allreduce(self, tensors, opts=None):
        op = _op_of(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, "all_reduce")
        for t in tensors:
            C.allreduce(self._dense(t, "all_reduce"), op=op, **self._kw("all_reduce"))
        return _done(tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        op = _op_of(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, "all_reduce_coalesced")
        C.grouped_allreduce(tensors, op=op, **self._kw("all_reduce_coalesced"))
        return _done(tensors)

    def broadcast(self, tensors, opts=None):
        root = self.ranks[opts.rootRank if opts is not None else 0]
        for t in tensors:
            C.broadcast(self._dense(t, "broadcast"), root, **self._kw("broadcast"))
        return _done(tensors)

    def _gather(self, t, what):
        rows = C.allgather(self._dense(t, what).detach().reshape(1, -1), **self._kw(what))
        return [rows[self._row(r)].view(t.shape) for r in range(self.size())]

    def allgather(self, output_lists, inputs, opts=None):
        for outs, t in zip(output_lists, inputs):
            if len(outs) != self.size():
                raise InvalidArgumentError(f"all_gather: {len(outs)} outputs for a group of {self.size()}")
            for out, part in zip(outs, self._gather(t, "all_gather")):
                out.copy_(part)
        return _done()

    def _allgather_base(self, output, input, opts=None):  # noqa: A002 (torch's name)
        parts = self._gather(input, "all_gather_base")
        output.view(self.size(), -1).copy_(torch.stack([p.reshape(-1) for p in parts]))
        return _done()

    def reduce_scatter(self, outputs, input_lists, opts=None):
        op = _op_of(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, "reduce_scatter")
        for out, ins in zip(outputs, input_lists):
            if len(ins) != self.size():
                raise InvalidArgumentError(f"reduce_scatter: {len(ins)} inputs for a group of {self.size()}")
            whole = torch.stack([i.reshape(-1) for i in ins]).contiguous()
            C.allreduce(whole, op=op, **self._kw("reduce_scatter"))
            out.copy_(whole[self.rank()].view(out.shape))
        return _done()

    def reduce(self, tensors, opts=None):
        op = _op_of(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, "reduce")
        for t in tensors:  # every member gets the result; only the root's counts
            C.allreduce(self._dense(t, "reduce"), op=op, **self._kw("reduce"))
        return _done(tensors)

    def gather(self, output_lists, inputs, opts=None):
        root = opts.rootRank if opts is not None else 0
        for i, t in enumerate(inputs):
            parts = self._gather(t, "gather")
            if self.rank() == root:
                for out, part in zip(output_lists[i], parts):
                    out.copy_(part)
        return _done()

    def scatter(self, outputs, input_lists, opts=None):
        root = opts.rootRank if opts is not None else 0
        for i, out in enumerate(outputs):
            whole = torch.empty((self.size(),) + tuple(out.shape), dtype=out.dtype, device=out.device)
            if self.rank() == root:
                torch.stack(list(input_lists[i]), out=whole)
            C.broadcast(whole, self.ranks[root], **self._kw("scatter"))
            out.copy_(whole[self.rank()])
        return _done()

    def barrier(self, opts=None):
        C.barrier(process_set=self.set, worker=self.worker, timeout=self.timeout, name="torch.barrier")
        return _done()

    def _not_offered(self, what):
        raise NotImplementedError(f"layerps backend: {what} is not offered (docs/python.md, "
                                  f"'torch.distributed backend')")

    def send(self, *args, **kwargs):
        self._not_offered("send")

    def recv(self, *args, **kwargs):
        self._not_offered("recv")

    def recv_anysource(self, *args, **kwargs):
        self._not_offered("recv from any source")

    def alltoall(self, *args, **kwargs):
        self._not_offered("all_to_all")

    def alltoall_base(self, *args, **kwargs):
        self._not_offered("all_to_all_single")


def _start_worker(store, rank, size):
    """The process's LayerPS worker, started here: as layerps.init() under a launcher, or
    through torch's store."""
    if "LAYERPS_SCHEDULER" in os.environ or cluster.launcher() is not None:
        worker = cluster.init()
    else:
        key = "layerps/scheduler_address"
        if rank == 0:
            host = os.environ.get("MASTER_ADDR", "127.0.0.1")
            address = cluster.host_cluster(host, int(os.environ.get("LAYERPS_PORT", "0")), size,
                                           int(os.environ.get("LAYERPS_NUM_SERVERS", "1")))
            store.set(key, address)
        address = store.get(key).decode()
        worker = cluster.init(scheduler_address=address)
    atexit.register(cluster.shutdown)
    return worker


def _create(store, rank, size, timeout):
    worker = cluster._current_worker()
    if worker is None:
        worker = _start_worker(store, rank, size)
    # The group's members by LayerPS rank, through the group's own (prefixed) store.
    store.set(f"layerps/rank/{rank}", str(worker.rank))
    ranks = [int(store.get(f"layerps/rank/{r}").decode()) for r in range(size)]
    if len(set(ranks)) != size:
        raise InvalidArgumentError(f"layerps backend: the group's members are not distinct LayerPS workers "
                                   f"(LayerPS ranks by group rank: {ranks})")
    return ProcessGroupLayerPS(worker, rank, size, ranks, timeout)


def register():
    """Registers the backend (once; ``import layerps.torch`` calls it)."""
    if not hasattr(dist.Backend, NAME.upper()):
        dist.Backend.register_backend(NAME, _create)
