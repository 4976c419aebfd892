"""Horovod's torch API (``import layerps.torch as hvd``), on the C++ typed collectives
(docs/collectives.md): the process-level calls (init, rank, size...), the collectives on
tensors, the parameter and optimizer-state broadcasts, Compression and the reduce ops.
docs/python.md's table says what differs from Horovod.

Every collective here is collective where it says so: all members call it, in the same
order, with tensors of the same shapes. No state lives here: init() starts the process's
default worker, which layerps.cluster holds.
"""

import hashlib
import io
import pickle
import threading

import numpy as np
import torch

from .. import cluster as _cluster
from .. import collectives as _C
from ..collectives import ProcessSet, global_process_set
from ..errors import InvalidArgumentError
from ._common import named_tensors as _named_tensors
from ._common import worker_or_default as _worker


# Horovod's reduce ops.
Average, Sum, Min, Max, Product = _C.Average, _C.Sum, _C.Min, _C.Max, _C.Product


class Compression:
    """Horovod's ``Compression``: ``none``, or ``fp16`` (float32 gradients travel as IEEE
    half, combined in float32); also ``bf16``."""

    class _Wire:
        def __init__(self, wire):
            self.wire = wire

        def __repr__(self):
            return f"Compression.{'none' if self.wire == 'fp32' else self.wire}"

    none = _Wire("fp32")
    fp16 = _Wire("fp16")
    bf16 = _Wire("bf16")


# --- Horovod's process-level API ---------------------------------------------------------------

def init(comm=None, process_sets=None, **fields):
    """Horovod's init: starts this process's worker (layerps.init, under layerps-launch,
    torchrun, srun or mpirun) unless one is running. ``comm`` (an MPI communicator) is not
    taken; process sets need no registration."""
    if comm is not None:
        raise InvalidArgumentError("init(comm=...): LayerPS takes its members from the launcher, "
                                   "not from an MPI communicator")
    w = _cluster._current_worker()
    return w if w is not None else _cluster.init(**fields)


def shutdown():
    """Horovod's shutdown: stops this process's worker (layerps.shutdown)."""
    _cluster.shutdown()


def is_initialized():
    return _cluster._current_worker() is not None


def rank(worker=None):
    """This worker's rank, 0..size()-1 (the default worker's unless ``worker`` is given)."""
    return _worker(worker).rank


def size(worker=None):
    """How many workers the cluster has."""
    return _worker(worker).num_workers


def _hosts(w):
    """The workers' hostnames by rank."""
    return {n.rank: n.hostname for n in w.nodes() if str(n.role).lower().endswith("worker")}


def _host_ranks(w):
    by_rank = _hosts(w)
    mine = by_rank.get(w.rank)
    return sorted(r for r, h in by_rank.items() if h == mine)


def local_rank(worker=None):
    """This worker's index among the workers of its host (registered hostnames)."""
    w = _worker(worker)
    return _host_ranks(w).index(w.rank)


def local_size(worker=None):
    """How many workers run on this worker's host."""
    return len(_host_ranks(_worker(worker)))


def cross_rank(worker=None):
    """Horovod's cross_rank: the index of this worker's host among the hosts, ordered by
    their lowest worker rank."""
    w = _worker(worker)
    by_rank = _hosts(w)
    order = []
    for r in sorted(by_rank):
        if by_rank[r] not in order:
            order.append(by_rank[r])
    return order.index(by_rank[w.rank])


def cross_size(worker=None):
    """How many hosts the workers run on."""
    return len(set(_hosts(_worker(worker)).values()))


def add_process_set(process_set):
    """Horovod's add_process_set: LayerPS's sets need no registration; returns the set."""
    return process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)


def remove_process_set(process_set):
    return True


# --- Horovod's collectives on tensors --------------------------------------------------------

def _op(average, op, what):
    if average is not None and op is not None:
        raise InvalidArgumentError(f"{what}: pass average= or op=, not both")
    if average is not None:
        return Average if average else Sum
    if op is None:
        return Average
    if op not in (Average, Sum, Min, Max, Product):
        raise InvalidArgumentError(f"{what}: op must be Average, Sum, Min, Max or Product, not {op!r}")
    return op


def _wire_of(compression):
    if compression is None:
        return None
    wire = getattr(compression, "wire", None)
    if wire is None:
        raise InvalidArgumentError(f"compression must be Compression.none, .fp16 or .bf16, not {compression!r}")
    return wire


def _compression_for(tensor, compression):
    wire = _wire_of(compression)
    return wire if wire != "fp32" and tensor.dtype == torch.float32 else None


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set, compression=None, *, worker=None):
    """In-place all-reduce, started; ``synchronize(handle)`` returns ``tensor``."""
    return _C.allreduce_async(tensor, None, op=_op(average, op, "allreduce"), prescale=prescale_factor,
                              postscale=postscale_factor, compression=_compression_for(tensor, compression),
                              process_set=process_set, name=name, worker=_worker(worker))


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set, compression=None, *, worker=None):
    """All-reduce into a new tensor, started; ``synchronize(handle)`` returns it."""
    out = torch.empty_like(tensor)
    return _C.allreduce_async(tensor, out, op=_op(average, op, "allreduce"), prescale=prescale_factor,
                              postscale=postscale_factor, compression=_compression_for(tensor, compression),
                              process_set=process_set, name=name, worker=_worker(worker))


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set, *, worker=None):
    """Horovod's allreduce: a new tensor holding the op (default Average) over the set of
    every member's ``tensor``. Collective."""
    return allreduce_async(tensor, average, name, op, prescale_factor, postscale_factor, process_set,
                           compression, worker=worker).wait()


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set, compression=None, *, worker=None):
    """Horovod's allreduce_: in place; returns ``tensor``."""
    return allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set,
                            compression, worker=worker).wait()


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set, compression=None, *,
                             worker=None):
    return _C.grouped_allreduce_async(list(tensors), None, op=_op(average, op, "grouped_allreduce"),
                                      prescale=prescale_factor, postscale=postscale_factor,
                                      compression=_grouped_wire(tensors, compression), process_set=process_set,
                                      name=name, worker=_worker(worker))


def _grouped_wire(tensors, compression):
    wire = _wire_of(compression)
    if wire in (None, "fp32"):
        return None
    if any(t.dtype != torch.float32 for t in tensors):
        raise InvalidArgumentError("grouped_allreduce: compression applies to float32 tensors only")
    return wire


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set, compression=None, *,
                            worker=None):
    outs = [torch.empty_like(t) for t in tensors]
    return _C.grouped_allreduce_async(list(tensors), outs, op=_op(average, op, "grouped_allreduce"),
                                      prescale=prescale_factor, postscale=postscale_factor,
                                      compression=_grouped_wire(tensors, compression), process_set=process_set,
                                      name=name, worker=_worker(worker))


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set, *, worker=None):
    """Horovod's grouped_allreduce: new tensors; those of one type travel packed together."""
    return grouped_allreduce_async(tensors, average, name, op, prescale_factor, postscale_factor, process_set,
                                   compression, worker=worker).wait()


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set, compression=None, *, worker=None):
    return grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor, process_set,
                                    compression, worker=worker).wait()


def allgather_async(tensor, name=None, process_set=global_process_set, *, worker=None):
    return _C.allgather_async(tensor, process_set=process_set, name=name, worker=_worker(worker))


def allgather(tensor, name=None, process_set=global_process_set, *, worker=None):
    """Horovod's allgather: every member's tensor concatenated along dimension 0, in rank
    order (the first dimension may differ between members)."""
    return allgather_async(tensor, name, process_set, worker=worker).wait()


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set, *, worker=None):
    return _C.broadcast_async(tensor, root_rank, process_set=process_set, name=name, worker=_worker(worker))


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set, *, worker=None):
    return _C.broadcast_async(tensor.detach().clone(), root_rank, process_set=process_set, name=name,
                              worker=_worker(worker))


def broadcast(tensor, root_rank, name=None, process_set=global_process_set, *, worker=None):
    """Horovod's broadcast: a new tensor holding ``root_rank``'s ``tensor``."""
    return broadcast_async(tensor, root_rank, name, process_set, worker=worker).wait()


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set, *, worker=None):
    """Horovod's broadcast_: in place; returns ``tensor``."""
    return broadcast_async_(tensor, root_rank, name, process_set, worker=worker).wait()


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set, *, worker=None):
    return _C.alltoall_async(tensor, splits, process_set=process_set, name=name, worker=_worker(worker))


def alltoall(tensor, splits=None, name=None, process_set=global_process_set, *, worker=None):
    """Horovod's alltoall: rows (dimension 0) ``splits[q]`` go to the q-th member (None:
    equal parts). Returns the received tensor, and with ``splits`` also the received
    splits (an int32 tensor, in rank order)."""
    out, got = alltoall_async(tensor, splits, name, process_set, worker=worker).wait()
    return out if splits is None else (out, got)


def synchronize(handle):
    """Waits for an ``*_async`` collective and returns its result."""
    return handle.wait()


def poll(handle):
    """True once an ``*_async`` collective completed."""
    return handle.done()


def barrier(process_set=global_process_set, *, worker=None):
    """Horovod's barrier: returns once every member of the set called it."""
    _C.barrier(process_set=process_set, worker=_worker(worker))


def join(device=-1, *, worker=None, timeout=None):
    """Horovod's join: this worker ran out of data. Until every worker joined it takes part
    in the others' all-reduces with zeros (averages stay divided by the full size), and
    the scheduler's barriers and bsp/ssp tables go on without it (Worker.join). Returns
    the rank that joined last. Collective: every worker calls it once, at its end."""
    w = _worker(worker)
    failure = []

    def scheduler_join():
        try:
            w.join(timeout)
        except Exception as e:  # noqa: BLE001 (reported below, on the calling thread)
            failure.append(e)

    t = threading.Thread(target=scheduler_join, name="layerps-join", daemon=True)
    t.start()
    try:
        last = _C.join(worker=w, timeout=timeout)
    finally:
        t.join()
    if failure:
        raise failure[0]
    return last


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set, *, worker=None):
    """Horovod's broadcast_object: root_rank's object (pickled), returned on every member."""
    w = _worker(worker)
    payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8) if rank(w) == root_rank else np.zeros(0, np.uint8)
    length = np.array([payload.size], dtype=np.int64)
    _C.broadcast(length, root_rank, process_set=process_set, name=name, worker=w)
    buf = payload.copy() if rank(w) == root_rank else np.zeros(int(length[0]), dtype=np.uint8)
    _C.broadcast(buf, root_rank, process_set=process_set, name=name, worker=w)
    return obj if rank(w) == root_rank else pickle.loads(buf.tobytes())


def allgather_object(obj, name=None, process_set=global_process_set, *, worker=None):
    """Horovod's allgather_object: every member's object, in rank order."""
    w = _worker(worker)
    mine = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
    sizes = _C.allgather(np.array([mine.size], dtype=np.int64), process_set=process_set, name=name, worker=w)
    data = _C.allgather(mine.copy(), process_set=process_set, name=name, worker=w)
    out, at = [], 0
    for n in sizes.tolist():
        out.append(pickle.loads(data[at:at + n].tobytes()))
        at += n
    return out


def _flat_size(tensors):
    return int(sum(t.numel() for t in tensors))


# The most one broadcast of broadcast_parameters stages: small tensors are packed into
# buckets of at most this many bytes, a larger contiguous tensor is broadcast in place in
# slices of this size. A model's broadcast so costs at most this much extra memory, not
# a copy of the model (an 800k x 512 embedding is 1.6 GB, on every worker of a host).
BROADCAST_BUCKET_BYTES = 64 << 20


def _equal_everywhere(tensors, w, process_set, timeout):
    """The ids of those ``tensors`` (host, contiguous) whose bytes are already the same on
    every member: a 16-byte digest of each, compared in one all-reduce (the maximum of
    the digests and of their negations: equal everywhere iff max(d) == -max(-d)).
    Workers that seeded their models alike then skip the broadcast of large tables."""
    if not tensors:
        return set()
    digests = []
    for t in tensors:
        raw = t.detach().reshape(-1).view(torch.uint8).numpy()
        digests.append(np.frombuffer(hashlib.blake2b(raw, digest_size=16).digest(), dtype=np.int32))
    d = np.concatenate(digests).astype(np.int64)
    both = np.concatenate([d, -d])
    _C.allreduce(both, op=_C.Max, process_set=process_set, timeout=timeout, worker=w)
    n = d.size
    same = (both[:n] == -both[n:]).reshape(len(tensors), -1).all(axis=1)
    return {id(t) for t, s in zip(tensors, same) if s}


def _broadcast_buckets(tensors, bucket_bytes):
    """Splits one type's tensors into broadcast units, in order: ('slice', view) for a
    slice of a large contiguous tensor (broadcast in place), ('pack', [tensors]) for
    small tensors packed into one buffer of at most ``bucket_bytes``."""
    units, pack, packed = [], [], 0
    for t in tensors:
        n = t.numel()
        if n == 0:
            continue
        nbytes = n * t.element_size()
        if t.is_contiguous() and nbytes >= bucket_bytes:
            flat = t.detach().view(-1)
            step = max(1, bucket_bytes // t.element_size())
            units.extend(("slice", flat[s:s + step]) for s in range(0, n, step))
            continue
        if pack and packed + nbytes > bucket_bytes:
            units.append(("pack", pack))
            pack, packed = [], 0
        pack.append(t)
        packed += nbytes
    if pack:
        units.append(("pack", pack))
    return units


def broadcast_parameters(params, root_rank=0, process_set=global_process_set, *, worker=None, name=None,
                         timeout=None):
    """Horovod's broadcast_parameters: overwrites every worker's tensors (in place) with
    root_rank's. Collective. ``params``: ``model.named_parameters()``,
    ``model.state_dict()``, a dict or a list of tensors; every tensor is sent (integer
    buffers such as BatchNorm's counters too). Small tensors of one type travel packed
    together, a large contiguous one in place in slices: at most
    ``BROADCAST_BUCKET_BYTES`` are staged at a time. A large host tensor whose bytes are
    already equal on every member (compared by digest) is not sent at all."""
    if isinstance(root_rank, _cluster.Worker):
        raise InvalidArgumentError("broadcast_parameters(params, root_rank, process_set): the second argument "
                                   "is the root rank (Horovod's order); pass the worker as worker=")
    w = _worker(worker)
    items = _named_tensors(params, "broadcast_parameters")
    if not 0 <= int(root_rank) < w.num_workers:
        raise InvalidArgumentError(f"root_rank {root_rank} is not a worker rank (0..{w.num_workers - 1})")
    large = [t for _, t in items if not t.is_cuda and t.is_contiguous()
             and t.numel() * t.element_size() >= BROADCAST_BUCKET_BYTES]
    already = _equal_everywhere(large, w, process_set, timeout)
    by_type = {}  # broadcasts per type and device (a GPU's tensors packed on that GPU)
    for _, t in items:
        if id(t) not in already:
            by_type.setdefault((t.dtype, t.device), []).append(t)
    unit = 0
    for dtype, device in sorted(by_type, key=str):
        for kind, what in _broadcast_buckets(by_type[(dtype, device)], BROADCAST_BUCKET_BYTES):
            unit_name = None if name is None else f"{name}.{unit}"
            unit += 1
            if kind == "slice":
                _C.broadcast(what, int(root_rank), process_set=process_set, name=unit_name, timeout=timeout,
                             worker=w)
                continue
            flat = torch.empty(_flat_size(what), dtype=dtype, device=device)
            off = 0
            for t in what:
                n = t.numel()
                flat[off:off + n].copy_(t.detach().reshape(-1))
                off += n
            _C.broadcast(flat, int(root_rank), process_set=process_set, name=unit_name, timeout=timeout,
                         worker=w)
            with torch.no_grad():
                off = 0
                for t in what:
                    n = t.numel()
                    t.copy_(flat[off:off + n].view_as(t))
                    off += n


def broadcast_optimizer_state(optimizer, root_rank=0, process_set=global_process_set, *, worker=None,
                              name=None, timeout=None):
    """Horovod's broadcast_optimizer_state: every worker's optimizer state (``state_dict()``:
    momentum buffers, Adam moments, step counts, param_groups' hyper-parameters) becomes
    root_rank's. Collective; every worker's optimizer must have the same parameters
    (shapes, order). Works with a DistributedOptimizer or any torch optimizer."""
    if isinstance(root_rank, _cluster.Worker):
        raise InvalidArgumentError("broadcast_optimizer_state(optimizer, root_rank): pass the worker as worker=")
    w = _worker(worker)
    if not 0 <= int(root_rank) < w.num_workers:
        raise InvalidArgumentError(f"root_rank {root_rank} is not a worker rank (0..{w.num_workers - 1})")
    state = None
    if w.rank == root_rank:
        bio = io.BytesIO()
        torch.save(optimizer.state_dict(), bio)
        state = bio.getvalue()
    state = broadcast_object(state, int(root_rank), name, process_set, worker=w)
    if w.rank != root_rank:
        optimizer.load_state_dict(torch.load(io.BytesIO(state)))
