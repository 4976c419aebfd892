"""PyTorch integration: Horovod's torch API, synchronous data-parallel training and
server-held embeddings.

* Horovod's API, so that a Horovod script ports by changing its import
  (``import layerps.torch as hvd``): :func:`init`, :func:`shutdown`, :func:`rank`,
  :func:`size`, :func:`local_rank`, :func:`local_size`, :func:`cross_rank`,
  :func:`cross_size`, :func:`allreduce` (and ``allreduce_``, ``allreduce_async``,
  ``allreduce_async_``), :func:`grouped_allreduce` (and its forms), :func:`allgather`,
  :func:`broadcast` (and ``broadcast_``), :func:`alltoall`, :func:`synchronize`,
  :func:`poll`, :func:`join`, :func:`barrier`, :func:`broadcast_parameters`,
  :func:`broadcast_optimizer_state`, :func:`broadcast_object`, :func:`allgather_object`,
  :class:`Compression`, the ops ``Average``, ``Sum``, ``Min``, ``Max``, ``Product``, and
  :class:`ProcessSet`. They run on the C++ collectives (docs/collectives.md); the table
  in docs/python.md says what differs from Horovod.
* :class:`DistributedOptimizer` wraps a ``torch.optim`` optimizer: after ``backward()``,
  ``step()`` sends the gradients through the cluster and leaves every worker's parameters
  equal (bulk-synchronous: step t of every worker sees exactly the gradients of step t).
* :class:`Embedding` is an embedding table whose rows live on the servers: forward pulls
  only the batch's unique rows, backward pushes only their gradient rows.

Every function here is collective where it says so: all workers must call it, in the same
order, with tensors of the same shapes.
"""

import io
import itertools
import pickle
import threading

import numpy as np
import torch

from . import cluster as _cluster
from . import collectives as _C
from .cluster import default_worker
from . import hybrid as _hybrid
from ._aggregate_strategy import AggregateStrategy as _AggregateStrategy
from ._algorithm_strategy import AlgorithmStrategy as _AlgorithmStrategy
from ._allreduce_strategy import AllreduceStrategy as _AllreduceStrategy
from ._hybrid_strategy import HybridStrategy as _HybridStrategy
from ._server_strategy import ServerStrategy as _ServerStrategy
from .collectives import ProcessSet, global_process_set
from .errors import FailedPreconditionError, InvalidArgumentError

__all__ = ["DistributedOptimizer", "broadcast_parameters", "broadcast_optimizer_state", "Embedding",
           "rank", "size", "local_rank", "local_size", "cross_rank", "cross_size", "init", "shutdown",
           "is_initialized", "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
           "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
           "grouped_allreduce_async_", "allgather", "allgather_async", "broadcast", "broadcast_",
           "broadcast_async", "broadcast_async_", "alltoall", "alltoall_async", "synchronize", "poll",
           "join", "barrier", "broadcast_object", "allgather_object", "Compression", "Average",
           "Sum", "Min", "Max", "Product", "ProcessSet", "global_process_set", "add_process_set",
           "remove_process_set"]

_MODES = ("hybrid", "ps", "allreduce", "aggregate", "server", "horovod")

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


def _worker(worker):
    return worker if worker is not None else default_worker()


def _named_tensors(params, what):
    """[(name, tensor)] from named_parameters(), a dict / state_dict, or a list of tensors."""
    if isinstance(params, dict):
        items = list(params.items())
    else:
        items = list(params)
        if items and isinstance(items[0], torch.Tensor):
            items = [(f"p{i}", t) for i, t in enumerate(items)]
    for it in items:
        if not (isinstance(it, tuple) and len(it) == 2 and isinstance(it[1], torch.Tensor)):
            raise InvalidArgumentError(f"{what}: expected (name, tensor) pairs, a dict of tensors or tensors")
    names = [n for n, _ in items]
    if len(set(names)) != len(names):
        raise InvalidArgumentError(f"{what}: parameter names are not unique")
    return items


# --- Horovod's process-level API ---------------------------------------------------------------

def init(comm=None, process_sets=None, **fields):
    """Horovod's init: starts this process's worker (layerps.init, under layerps-launch,
    torchrun, srun or mpirun) unless one is running. ``comm`` (an MPI communicator) is not
    taken; process sets need no registration."""
    if comm is not None:
        raise InvalidArgumentError("init(comm=...): LayerPS takes its members from the launcher, "
                                   "not from an MPI communicator")
    if _cluster._default_worker is None:
        _cluster.init(**fields)
    return _cluster._default_worker


def shutdown():
    """Horovod's shutdown: stops this process's worker (layerps.shutdown)."""
    _cluster.shutdown()


def is_initialized():
    return _cluster._default_worker is not None


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


def broadcast_parameters(params, root_rank=0, process_set=global_process_set, *, worker=None, name=None,
                         timeout=None):
    """Horovod's broadcast_parameters: overwrites every worker's tensors (in place) with
    root_rank's. Collective. ``params``: ``model.named_parameters()``,
    ``model.state_dict()``, a dict or a list of tensors; every tensor is sent (integer
    buffers such as BatchNorm's counters too), those of one type packed in one broadcast."""
    if isinstance(root_rank, _cluster.Worker):
        raise InvalidArgumentError("broadcast_parameters(params, root_rank, process_set): the second argument "
                                   "is the root rank (Horovod's order); pass the worker as worker=")
    w = _worker(worker)
    items = _named_tensors(params, "broadcast_parameters")
    if not 0 <= int(root_rank) < w.num_workers:
        raise InvalidArgumentError(f"root_rank {root_rank} is not a worker rank (0..{w.num_workers - 1})")
    by_type = {}
    for _, t in items:
        by_type.setdefault(t.dtype, []).append(t)
    for dtype in sorted(by_type, key=str):
        tensors = by_type[dtype]
        flat = torch.empty(_flat_size(tensors), dtype=dtype)
        if flat.numel() == 0:
            continue
        off = 0
        for t in tensors:
            n = t.numel()
            flat[off:off + n].copy_(t.detach().reshape(-1))
            off += n
        _C.broadcast(flat, int(root_rank), process_set=process_set, name=name, timeout=timeout, worker=w)
        with torch.no_grad():
            off = 0
            for t in tensors:
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


class DistributedOptimizer(torch.optim.Optimizer):
    """Wraps ``optimizer`` so that ``step()`` first synchronizes the gradients (or the
    parameters) of ``named_parameters`` through the cluster. Collective: every worker
    builds it with the same parameters (names, shapes, order) and steps together.

    mode='horovod' (the default when ``compression``, ``op``, ``gradient_predivide_factor`` or
      ``process_set`` is given, as Horovod scripts do): Horovod's data parallelism. Each
      parameter's gradient is all-reduced in place by the typed collectives (op Average by
      default, over ``process_set``; ``compression=Compression.fp16`` sends float32 at 2
      bytes; ``gradient_predivide_factor=f`` sums grad/f and multiplies by f/size), each
      all-reduce started from the parameter's gradient hook as soon as backward produced
      it (``hook_allreduces`` counts them; ``overlap=False``: all from step()); step()
      waits for them and steps the wrapped optimizer. Any torch optimizer. Every worker's
      backward must produce the gradients in the same order (the same model does).
    mode='hybrid' (default otherwise): each parameter is routed by its gradient's layout at the first
      step (layerps/hybrid.py). Sparse gradients (nn.Embedding / nn.EmbeddingBag with
      sparse=True) go to the parameter servers: the rows live in P sparse tables
      (``partitions``; default one per server) with the optimizer's rule applied on the
      servers (SGD, momentum, Nesterov, Adagrad, Adam/SparseAdam; lazily: only touched
      rows), the module's forward pulls only the batch's rows and the step pushes only the
      touched rows' averaged gradient. Dense gradients are averaged with Worker.allreduce
      and the local optimizer steps them. ``routes={"name": "ps" | "allreduce" |
      "allgather"}`` overrides single parameters. Workers of one host (``hosts=`` or the
      registered hostnames) aggregate first (``local_aggregation``): dense gradients
      all-reduced on the host, then across hosts by one leader each; sparse rows coalesced
      by the host's leader, which pushes once; with ``host_pulls=True`` the leader also
      pulls the union of its host's rows once per lookup and hands them out (every worker
      of a host must then run the same training forwards). Every worker starts from rank 0's values
      (broadcast at construction). ``repartition(P)`` and ``search_partitions(trial)`` tune
      P.
    mode='ps': the same with every parameter through the servers (dense ones by the
      aggregate scheme below, stepped locally). mode='allreduce': every parameter
      through the all-reduce (sparse gradients densified).

    mode='aggregate': every worker pushes its gradient to a dense table with
      rule 'sum', pulls the sum of all workers' gradients of this step, divides it by the
      number of workers and takes the local optimizer's step. Any torch optimizer works
      (momentum, Adam, weight decay...); the workers stay equal because they start equal
      (see broadcast_parameters) and apply the same averaged gradient.

      The server keeps a running sum (x += g), so per-step sums come from three tables
      used in rotation: step t pushes to table t % 3, meets the others at a barrier and
      pulls it (exactly the sum of step t's gradients, no differencing of large running
      sums); the workers then zero the tables of step t-1 (parameter i's by rank i % W),
      which everybody has pulled (they did so before the barrier of step t) and which
      nobody uses again before step t+2, whose pushes wait for the barrier of step t+1
      that each rank enters only once its zeroing is acknowledged. One barrier per step.

    mode='server': the parameters live on the servers in a table with rule 'sgd'
      (x -= lr * g, lr from the optimizer's param group unless ``lr`` is given; plain
      SGD: momentum and weight decay are not applied). Without ``lr``, a change of the
      param group's lr (an LR scheduler) reaches the servers at the next step
      (Worker.set_learning_rate, before that step's push). Each worker pushes gradient/N,
      meets the others, pulls the updated parameters and meets them again (two barriers
      per step so no push of step t+1 reaches a server before everybody pulled step t).
      The local optimizer is not stepped. Rank 0's parameters seed the table.

    algorithm='bsp' | 'asp' | 'ssp(s)' | 'easgd(tau,alpha)' | 'arsgd' | 'gosgd(p)' |
      'adpsgd' (replaces ``mode``): one of the seven training algorithms of
      docs/algorithms.md, run by the C++ ``ps::Trainer`` (layerps.algorithms.Trainer).
      ``optimizer`` must then be a ``torch.optim.SGD`` (its lr, momentum and nesterov are
      used; weight_decay and dampening must be 0; one lr for every group); warm-up and
      decay are the orthogonal switches ``warmup_steps``, ``decay`` ('none', 'step',
      'exponential', 'cosine'), ``gamma`` and ``decay_every``. The parameters are moved
      into one flat buffer that the algorithm updates in place (``p.data`` becomes a view
      of it); ``step()`` hands it this worker's gradient and does not step ``optimizer``.
      Call ``finish()`` (collective) at the end: it drains gossips and averagings.

    Modes 'server' and algorithm=...: the gradients of all parameters travel fused in one
    flat float32 buffer (one request per step). Mode 'aggregate': one table per parameter
    (three, for the rotation), and each parameter's push starts from a hook as soon as
    backward has produced its gradient (its AccumulateGrad node's hook;
    ``register_post_accumulate_grad_hook`` where torch has it), so the pushes overlap the
    rest of backward; ``step()`` pushes what no hook pushed (gradients set by hand), waits
    for the pushes, meets the others and pulls. ``overlap=False`` registers no hook (every
    push from step()). ``backward_passes_per_step=N`` (as Horovod's): the gradients of N
    backward passes accumulate locally (summed, as torch does) and the hook pushes after
    the N-th; call step() once per N passes. ``hook_pushes`` counts the pushes started
    from hooks. A parameter without a gradient counts as a zero gradient.

    It is a ``torch.optim.Optimizer`` (isinstance holds) that shares the wrapped
    optimizer's ``param_groups``, ``state`` and ``defaults`` (the same objects): LR
    schedulers given this optimizer change the learning rate the wrapped one uses;
    ``state_dict()``/``load_state_dict()``/``zero_grad()``/``add_param_group()`` are the
    wrapped optimizer's. The wrapped optimizer stays reachable as ``.optimizer``.
    """

    def __init__(self, optimizer, named_parameters=None, *, worker=None, mode=None,
                 name="model", lr=None, timeout=None, algorithm=None, warmup_steps=0,
                 decay="none", gamma=0.1, decay_every=0, seed=0, routes=None, hosts=None,
                 local_aggregation=True, partitions=None, backward_passes_per_step=1,
                 overlap=True, host_pulls=False, compression=None, op=None,
                 gradient_predivide_factor=None, process_set=None):
        if algorithm is not None and mode is not None:
            raise InvalidArgumentError("pass either mode= or algorithm=, not both")
        horovod_args = {k: v for k, v in (("compression", compression), ("op", op),
                                          ("gradient_predivide_factor", gradient_predivide_factor),
                                          ("process_set", process_set)) if v is not None}
        if mode is None and algorithm is None:
            # Horovod's all-reduce arguments ask for Horovod's mode; else the hybrid.
            mode = "horovod" if horovod_args else "hybrid"
        if horovod_args and mode != "horovod":
            raise InvalidArgumentError(f"{', '.join(horovod_args)}= belong to mode 'horovod' (Horovod's "
                                       f"all-reduce), not {mode!r}")
        if algorithm is not None:
            mode = "algorithm"
        elif mode not in _MODES:
            raise InvalidArgumentError(f"mode must be one of {', '.join(repr(m) for m in _MODES)}, not {mode!r}")
        if mode not in _hybrid.MODES and (routes is not None or hosts is not None or partitions is not None
                                          or host_pulls):
            raise InvalidArgumentError("routes=, hosts=, partitions= and host_pulls= belong to modes 'hybrid', "
                                       "'ps' and 'allreduce'")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise InvalidArgumentError(f"optimizer must be a torch.optim.Optimizer, not {type(optimizer).__name__}")
        if int(backward_passes_per_step) < 1:
            raise InvalidArgumentError("backward_passes_per_step must be >= 1")
        # A real torch.optim.Optimizer whose groups, state and defaults are the wrapped
        # optimizer's own objects (as Horovod's wrapper shares them).
        torch.optim.Optimizer.__init__(
            self, [{"params": list(g["params"])} for g in optimizer.param_groups], dict(optimizer.defaults))
        self.optimizer = optimizer  # from here on param_groups, state, defaults are its own
        self._wrapping_done = True
        self.backward_passes_per_step = int(backward_passes_per_step)
        self.overlap = bool(overlap)
        self.worker = w = _worker(worker)
        self.mode = mode
        self.timeout = timeout
        if named_parameters is None:
            named_parameters = [(f"param{i}", p) for i, p in enumerate(
                itertools.chain.from_iterable(g["params"] for g in optimizer.param_groups))]
        items = [(n, p) for n, p in _named_tensors(named_parameters, "named_parameters") if p.requires_grad]
        if not items:
            raise InvalidArgumentError("DistributedOptimizer: no parameter requires a gradient")
        for n, p in items:
            if p.dtype != torch.float32:
                raise InvalidArgumentError(f"parameter '{n}': expected float32, got {p.dtype}")
        params = [p for _, p in items]
        names = [n for n, _ in items]
        # The mode's strategy (layerps/_optimizer_strategy.py), chosen once: from here on
        # synchronize(), step() and finish() only delegate to it.
        if mode == "horovod":
            self._strategy = _AllreduceStrategy(
                params, names, w, compression=compression,
                op=Average if op is None else op,
                gradient_predivide_factor=1.0 if gradient_predivide_factor is None else gradient_predivide_factor,
                process_set=process_set, backward_passes_per_step=self.backward_passes_per_step,
                overlap=self.overlap, timeout=timeout)
        elif mode in _hybrid.MODES:
            # Every worker starts from rank 0's values; the routes are decided at the first
            # step, from the gradients' layouts (layerps/hybrid.py).
            broadcast_parameters(items, 0, worker=w, timeout=timeout)
            self._strategy = _HybridStrategy(optimizer, names, params, w, mode, name, timeout, routes=routes,
                                             hosts=hosts, local_aggregation=local_aggregation,
                                             partitions=partitions, host_pulls=host_pulls)
        elif mode == "algorithm":
            self._strategy = _AlgorithmStrategy(optimizer, params, names, w, algorithm, lr=lr, name=name,
                                                timeout=timeout, warmup_steps=warmup_steps, decay=decay,
                                                gamma=gamma, decay_every=decay_every, seed=seed)
        elif mode == "aggregate":
            self._strategy = _AggregateStrategy(params, names, w, name, timeout,
                                                backward_passes_per_step=self.backward_passes_per_step,
                                                overlap=self.overlap)
        else:
            self._strategy = _ServerStrategy(optimizer, params, names, w, name, lr, timeout)

    # --- forwarding ----------------------------------------------------------------------
    # param_groups, state and defaults are the wrapped optimizer's attributes, read and
    # written through (its load_state_dict rebinds them: they must never be copies).
    # Before the wrapped optimizer is attached (torch.optim.Optimizer.__init__) they are
    # this object's own.
    def _forwarded(name):
        def get(self):
            opt = self.__dict__.get("optimizer")
            return getattr(opt, name) if opt is not None else self.__dict__.get("_own_" + name)

        def put(self, value):
            opt = self.__dict__.get("optimizer")
            if opt is not None:
                setattr(opt, name, value)
            else:
                self.__dict__["_own_" + name] = value

        return property(get, put)

    param_groups = _forwarded("param_groups")
    state = _forwarded("state")
    defaults = _forwarded("defaults")
    del _forwarded

    def zero_grad(self, set_to_none=False):
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def add_param_group(self, param_group):
        if not getattr(self, "_wrapping_done", False):  # torch.optim.Optimizer.__init__
            return super().add_param_group(param_group)
        # Not synchronized: the tables are laid out at construction.
        raise FailedPreconditionError("DistributedOptimizer: add the param group to the wrapped optimizer "
                                      "before wrapping it")

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, state):
        self.optimizer.load_state_dict(state)

    # --- the step ------------------------------------------------------------------------
    def step(self, closure=None):
        """Synchronizes through the cluster, then (aggregate mode) steps the optimizer."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.synchronize()
        self._strategy.local_step(self.optimizer)
        return loss

    def synchronize(self):
        """Aggregate mode: replaces every .grad by the average over the workers of this
        step's gradients. Server mode: applies the step on the servers and loads the new
        parameters. Collective."""
        self._strategy.synchronize()

    @property
    def hook_pushes(self):
        """Mode 'aggregate': the pushes started from gradient hooks so far."""
        return self._strategy.hook_pushes

    @hook_pushes.setter
    def hook_pushes(self, value):
        self._strategy.hook_pushes = value

    @property
    def hook_allreduces(self):
        """Mode 'horovod': the all-reduces started from gradient hooks so far."""
        return self._strategy.hook_allreduces

    @property
    def lr(self):
        """Mode 'server': the learning rate of the servers' rule."""
        try:
            return self._strategy.lr
        except AttributeError:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute 'lr'") from None

    @property
    def trainer(self):
        """The layerps.algorithms.Trainer under algorithm=... (None in the other modes)."""
        return self._strategy.trainer

    def finish(self):
        """Waits for the last background request (call before the worker stops); with
        algorithm=..., the collective end of training (drains gossips and averagings)."""
        self._strategy.finish()

    # --- the hybrid (modes 'hybrid', 'ps', 'allreduce') ----------------------------------------
    def _need_hybrid(self, what):
        if self._strategy.hybrid is None:
            raise FailedPreconditionError(f"{what} belongs to modes 'hybrid', 'ps' and 'allreduce'")
        return self._strategy.hybrid

    @property
    def routes(self):
        """{parameter name: 'ps' or 'allreduce'}, decided at the first step."""
        return self._need_hybrid("routes").routes

    @property
    def kinds(self):
        """{parameter name: 'sparse' or 'dense'}: its gradients' layout at the first step."""
        return self._need_hybrid("kinds").kinds

    @property
    def partitions(self):
        """{name of a server-held sparse parameter: its number of partitions P}."""
        return self._need_hybrid("partitions").partitions

    @property
    def hybrid(self):
        """The layerps.hybrid.Hybrid doing the synchronization (None in the other modes)."""
        return self._strategy.hybrid

    def repartition(self, partitions, names=None):
        """Moves the server-held sparse parameters (all, or those ``names``) to
        ``partitions`` partitions without losing a row (collective, between steps; the
        rules' server-side state restarts). 0 or more partitions than rows is refused."""
        self._need_hybrid("repartition").repartition(partitions, names)

    def pull_sparse_params(self):
        """Copies the server-held rows into the local weights (e.g. before saving)."""
        self._need_hybrid("pull_sparse_params").pull_sparse_params()

    def search_partitions(self, trial, *, steps=3, warmup=1, p_min=1, p_max=None, names=None):
        """Tunes P by trial steps (layerps.partition.search): for each P tried, repartition,
        run ``warmup`` then ``steps`` calls of ``trial()`` (one training step: forward,
        backward, this optimizer's step), and take the workers' mean seconds per step.
        Collective. Leaves the tables at the chosen P; returns (P, [(P, seconds)...])."""
        self._need_hybrid("search_partitions")
        return self._strategy.search_partitions(trial, steps=steps, warmup=warmup, p_min=p_min, p_max=p_max,
                                                names=names)


class _PullRows(torch.autograd.Function):
    """rows = the server's rows of `keys`; backward pushes the rows' gradient."""

    @staticmethod
    def forward(ctx, trigger, keys, module):
        ctx.keys = keys
        ctx.module = module
        return module._pull_rows(keys)

    @staticmethod
    def backward(ctx, grad_rows):
        ctx.module._push_grad(ctx.keys, grad_rows)
        return None, None, None


_embedding_counter = itertools.count()


class Embedding(torch.nn.Module):
    """An embedding table held by the servers (a sparse table with rule 'sgd').

    ``forward(ids)`` takes integer ids of any shape and returns ``ids.shape + (dim,)``
    float32 rows. It pulls only the batch's unique ids; backward pushes the summed
    gradient of each unique row (times ``grad_scale``), and the servers apply
    ``row -= lr * grad``: the rows are trained by the servers, not by a local optimizer
    (the module has no local parameters). Pushes are asynchronous; the next forward (or
    ``flush()``) waits for them, so a worker always sees its own updates.

    ``num_embeddings``: ids must lie in [0, num_embeddings); None for hashed ids (any
    64-bit value, e.g. a feature hash). Rows are created on first touch on the servers
    with ``init`` ('uniform' in [init_a, init_b), 'normal' (mean init_a, std init_b) or
    'zeros'), seeded by (seed, table name, id), so every worker and run agrees.

    Give each Embedding a ``name`` (the table's name): workers must agree on it.

    ``capacity``, ``eviction``, ``expiry_steps``, ``admit_after``, ``admit_probability``
    bound the table's rows on each server, as for ``Worker.declare_sparse``
    (docs/sparse.md): an evicted or not yet admitted id reads as its initial value.

    ``cache_rows`` and ``cache_staleness`` give the worker a cache of pulled rows
    (docs/sparse.md "Worker cache"): a forward reuses a row pulled fewer than
    ``cache_staleness`` backward passes ago instead of pulling it again, so within that
    window the worker does not see the updates of its own (or others') pushes to it.
    """

    def __init__(self, num_embeddings, embedding_dim, *, worker=None, name=None, lr=0.01,
                 init="uniform", init_a=-0.05, init_b=0.05, seed=0, grad_scale=1.0, timeout=None,
                 capacity=0, eviction=None, expiry_steps=0, admit_after=0, admit_probability=1.0,
                 cache_rows=0, cache_staleness=0):
        super().__init__()
        if num_embeddings is not None and int(num_embeddings) < 1:
            raise InvalidArgumentError("num_embeddings must be >= 1 (or None for hashed ids)")
        if int(embedding_dim) < 1:
            raise InvalidArgumentError("embedding_dim must be >= 1")
        self.num_embeddings = None if num_embeddings is None else int(num_embeddings)
        self.embedding_dim = int(embedding_dim)
        self.worker = _worker(worker)
        self.name = name if name is not None else f"layerps.embedding.{next(_embedding_counter)}"
        self.grad_scale = float(grad_scale)
        self.timeout = timeout
        self.table = self.worker.declare_sparse(self.name, self.embedding_dim, "sgd", lr=lr, init=init,
                                                init_a=init_a, init_b=init_b, seed=seed,
                                                capacity=capacity, eviction=eviction,
                                                expiry_steps=expiry_steps, admit_after=admit_after,
                                                admit_probability=admit_probability,
                                                cache_rows=cache_rows, cache_staleness=cache_staleness)
        self._pending = []
        self.rows_pulled = 0
        self.rows_pushed = 0

    def extra_repr(self):
        n = "hashed" if self.num_embeddings is None else self.num_embeddings
        return f"{n}, {self.embedding_dim}, table='{self.name}', lr={self.table.spec.learning_rate:g}"

    def _ids(self, ids):
        ids = torch.as_tensor(ids)
        if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
            raise InvalidArgumentError(f"Embedding '{self.name}': ids must be integers, got {ids.dtype}")
        ids = ids.to(torch.int64)
        if self.num_embeddings is not None and ids.numel():
            lo, hi = int(ids.min()), int(ids.max())
            if lo < 0 or hi >= self.num_embeddings:
                raise InvalidArgumentError(f"Embedding '{self.name}': ids must lie in [0, {self.num_embeddings}), "
                                           f"got values in [{lo}, {hi}]")
        return ids

    def forward(self, ids):
        ids = self._ids(ids)
        self.flush()
        keys, inverse = torch.unique(ids.reshape(-1), return_inverse=True)
        trigger = torch.empty(0, requires_grad=torch.is_grad_enabled())
        rows = _PullRows.apply(trigger, keys, self)
        return rows[inverse].reshape(*ids.shape, self.embedding_dim)

    def pull(self, ids):
        """The servers' current rows for ``ids`` (no autograd)."""
        ids = self._ids(ids)
        self.flush()
        return self._pull_rows(ids.reshape(-1)).reshape(*ids.shape, self.embedding_dim)

    def flush(self):
        """Waits for this module's pushes in flight; raises the first failure."""
        pending, self._pending = self._pending, []
        for h in pending:
            h.wait(self.timeout)

    def _pull_rows(self, keys):
        out = torch.empty(keys.numel(), self.embedding_dim, dtype=torch.float32)
        self.worker.pull_sparse(self.table, keys, out).wait(self.timeout)
        self.rows_pulled += keys.numel()
        return out

    def _push_grad(self, keys, grad_rows):
        g = grad_rows.detach().to(torch.float32)
        if self.grad_scale != 1.0:
            g = g * self.grad_scale
        self._pending.append(self.worker.push_sparse(self.table, keys, g.contiguous()))
        self.rows_pushed += keys.numel()

    # --- state_dict: the servers' rows --------------------------------------------------
    _STATE_CHUNK = 65536  # rows per pull/assign when saving or loading

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        """``state_dict()`` holds ``weight``: every row, pulled from the servers (an
        (num_embeddings, dim) tensor). A hashed table (num_embeddings=None) cannot list
        its rows: FailedPreconditionError."""
        if self.num_embeddings is None:
            raise FailedPreconditionError(
                f"Embedding '{self.name}': a hashed table (num_embeddings=None) cannot list its rows "
                "for state_dict(); use the servers' checkpoints")
        self.flush()
        weight = torch.empty(self.num_embeddings, self.embedding_dim, dtype=torch.float32)
        for start in range(0, self.num_embeddings, self._STATE_CHUNK):
            keys = torch.arange(start, min(self.num_embeddings, start + self._STATE_CHUNK), dtype=torch.int64)
            weight[start:start + keys.numel()] = self._pull_rows(keys)
        destination[prefix + "weight"] = weight

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        """``load_state_dict()`` assigns every row of ``weight`` on the servers (every
        worker may call it: the same values are assigned)."""
        key = prefix + "weight"
        if key not in state_dict:
            if strict:
                missing_keys.append(key)
            return
        weight = torch.as_tensor(state_dict[key])
        if self.num_embeddings is None or tuple(weight.shape) != (self.num_embeddings, self.embedding_dim):
            error_msgs.append(f"Embedding '{self.name}': weight of shape {tuple(weight.shape)}, expected "
                              f"({self.num_embeddings}, {self.embedding_dim})")
            return
        self.flush()
        weight = weight.detach().to(torch.float32).contiguous()
        handles = []
        for start in range(0, self.num_embeddings, self._STATE_CHUNK):
            keys = torch.arange(start, min(self.num_embeddings, start + self._STATE_CHUNK), dtype=torch.int64)
            handles.append(self.worker.assign_sparse(self.table, keys, weight[start:start + keys.numel()]))
        for h in handles:
            h.wait(self.timeout)


class EmbeddingBag(Embedding):
    """Sums or averages bags of embedding rows held by the servers, as
    ``torch.nn.EmbeddingBag``: ``forward(input, offsets=None)`` with a 2-D ``input`` (each
    row a bag of equal length) or a 1-D ``input`` and ``offsets`` (bag i is
    input[offsets[i]:offsets[i+1]]); returns (bags, dim). ``mode`` 'sum' or 'mean' (an empty
    bag gives zeros). Only the batch's unique ids are pulled; backward pushes each unique
    row's summed gradient; the servers apply ``row -= lr * grad``. Other arguments, and
    ``state_dict()``/``load_state_dict()``, as for :class:`Embedding`."""

    def __init__(self, num_embeddings, embedding_dim, *, mode="mean", **kwargs):
        if mode not in ("sum", "mean"):
            raise InvalidArgumentError(f"EmbeddingBag: mode must be 'sum' or 'mean', not {mode!r}")
        super().__init__(num_embeddings, embedding_dim, **kwargs)
        self.mode = mode

    def extra_repr(self):
        return super().extra_repr() + f", mode='{self.mode}'"

    def forward(self, input, offsets=None):
        ids = self._ids(input)
        if ids.dim() == 2:
            if offsets is not None:
                raise InvalidArgumentError("EmbeddingBag: offsets belong to a 1-D input")
            bags, length = ids.shape
            offsets = torch.arange(0, bags * length, length, dtype=torch.int64)
            ids = ids.reshape(-1)
        elif ids.dim() == 1:
            if offsets is None:
                raise InvalidArgumentError("EmbeddingBag: a 1-D input needs offsets")
            offsets = torch.as_tensor(offsets).to(torch.int64)
            if offsets.dim() != 1 or (offsets.numel() and (int(offsets[0]) != 0 or
                                                          bool((offsets[1:] < offsets[:-1]).any()) or
                                                          int(offsets[-1]) > ids.numel())):
                raise InvalidArgumentError("EmbeddingBag: offsets must be 1-D, start at 0, not decrease "
                                           "and not pass the input's length")
        else:
            raise InvalidArgumentError(f"EmbeddingBag: input must be 1-D or 2-D, got {ids.dim()}-D")
        self.flush()
        keys, inverse = torch.unique(ids, return_inverse=True)
        trigger = torch.empty(0, requires_grad=torch.is_grad_enabled())
        rows = _PullRows.apply(trigger, keys, self)
        return torch.nn.functional.embedding_bag(inverse, rows, offsets, mode=self.mode)
