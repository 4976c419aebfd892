"""DDP communication hooks over LayerPS (``DistributedDataParallel.register_comm_hook``).

A DDP script keeps its model, its optimizer and its process group (gloo, or LayerPS's own
``"layerps"`` backend where the installed torch supports Python backends) and hands the
gradient exchange to LayerPS::

    import layerps.torch as lt
    from layerps.torch import hooks

    lt.init()                                            # the LayerPS worker (docs/launch.md)
    model = torch.nn.parallel.DistributedDataParallel(net)
    model.register_comm_hook(None, hooks.allreduce_hook)            # LayerPS's all-reduce
    model.register_comm_hook(None, hooks.fp16_compress_hook)        # at 2 bytes a value
    model.register_comm_hook(hooks.PSHookState(), hooks.ps_hook)    # through the servers

Each hook returns a future that a completion thread fulfils when LayerPS's asynchronous
operation ends, so DDP goes on with backward meanwhile (its buckets overlap as with its own
all-reduce). Every hook averages over the LayerPS workers (``state`` may name a process
set or another worker); the LayerPS workers must be the DDP ranks (one each).
"""

import queue
import threading

import torch

from .. import collectives as C
from ..cluster import default_worker
from ..errors import InvalidArgumentError

__all__ = ["allreduce_hook", "fp16_compress_hook", "ps_hook", "AllReduceState", "PSHookState"]


class _Completer:
    """One daemon thread that waits for LayerPS operations in the order they started and
    fulfils their torch futures (set_exception on failure)."""

    def __init__(self):
        self._queue = queue.Queue()
        self._thread = None
        self._lock = threading.Lock()

    def submit(self, wait, finish):
        fut = torch.futures.Future()
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="layerps-ddp-hooks", daemon=True)
                self._thread.start()
        self._queue.put((wait, finish, fut))
        return fut

    def _run(self):
        while True:
            wait, finish, fut = self._queue.get()
            try:
                value = finish(wait())
            except BaseException as e:  # the future carries it to DDP's wait
                fut.set_exception(e)
                continue
            fut.set_result(value)


_completer = _Completer()


class AllReduceState:
    """What :func:`allreduce_hook` and :func:`fp16_compress_hook` run over: a process set
    (None: every worker) and a worker (None: the default one). ``state=None`` is the same
    as ``AllReduceState()``."""

    def __init__(self, process_set=None, worker=None, timeout=None):
        self.process_set = process_set
        self.worker = worker
        self.timeout = timeout


def _allreduce(state, bucket, compression):
    state = state if state is not None else AllReduceState()
    if not isinstance(state, AllReduceState):
        raise InvalidArgumentError(f"LayerPS all-reduce hooks take None or an AllReduceState as state, "
                                   f"not {type(state).__name__}")
    t = bucket.buffer()
    h = C.allreduce_async(t, op=C.Average, compression=compression, process_set=state.process_set,
                          timeout=state.timeout, name=f"ddp-bucket-{bucket.index()}",
                          worker=state.worker)
    return _completer.submit(h.wait, lambda _: t)


def allreduce_hook(state, bucket):
    """The bucket averaged by LayerPS's all-reduce (as DDP's own: the same values within
    the rounding of another summation order)."""
    return _allreduce(state, bucket, None)


def fp16_compress_hook(state, bucket):
    """As :func:`allreduce_hook` with the values travelling as float16 (2 bytes each) and
    combined in float32 (torch's fp16_compress_hook combines in float16)."""
    return _allreduce(state, bucket, "fp16")


class PSHookState:
    """:func:`ps_hook`'s state: the worker (None: the default one), the tables' name
    prefix, and a timeout for the pushes and pulls (seconds, None: request_timeout_ms).

    Per bucket (its index and size) one dense table of rule ``sum`` with ``sync="bsp"``:
    the servers sum a step's pushes of every worker and apply them at once, and a pull
    waits for its step. The table holds the step's mean gradient: each worker pushes the
    change of its share (its gradient / W) since its previous step, so the servers' sum
    moves from step t-1's mean to step t's; the hook pulls it. (The float32 additions round
    like any running sum of changes: the error stays at the gradient's scale, about
    sqrt(steps) ulps, not at the scale of a growing sum.)"""

    def __init__(self, worker=None, name="ddp", timeout=None):
        self.worker = worker
        self.name = str(name)
        self.timeout = timeout
        self._tables = {}  # (bucket index, numel) -> (table, last pushed share)


def _ps_table(state, w, index, numel):
    key = (index, numel)
    if key in state._tables:
        return state._tables[key]
    # Every rank must give this bucket the same size (DDP's buckets differ between ranks
    # when their bucket_cap_mb or parameter order differ): say which rank differs.
    sizes = C.allgather(torch.tensor([numel], dtype=torch.int64), worker=w,
                        name=f"{state.name}-bucket-{index}-size").tolist()
    if any(s != numel for s in sizes):
        other = next(r for r, s in enumerate(sizes) if s != numel)
        raise InvalidArgumentError(
            f"ps_hook: DDP bucket {index} holds {numel} values on rank {w.rank} but {sizes[other]} on "
            f"rank {other} (sizes by rank: {sizes}); give every rank the same model and bucket_cap_mb")
    table = w.declare_dense(f"{state.name}/bucket{index}/{numel}", numel, "sum", sync="bsp")
    state._tables[key] = entry = (table, None)
    return entry


def ps_hook(state, bucket):
    """Sends the bucket through the servers (see :class:`PSHookState`) and returns the mean
    of every worker's bucket for this step."""
    if not isinstance(state, PSHookState):
        raise InvalidArgumentError(f"ps_hook takes a PSHookState as state, not {type(state).__name__}")
    w = state.worker or default_worker()
    t = bucket.buffer()
    flat = t.detach().reshape(-1)
    if flat.dtype != torch.float32:
        raise InvalidArgumentError(f"ps_hook: float32 gradients only, not {flat.dtype}")
    table, last = _ps_table(state, w, bucket.index(), flat.numel())
    if last is None or last.device != flat.device:  # the last share, beside the bucket
        last = torch.zeros(flat.numel(), dtype=torch.float32, device=flat.device)
        state._tables[(bucket.index(), flat.numel())] = (table, last)
    share = flat / w.num_workers
    change = (share - last).contiguous()
    last.copy_(share)
    out = torch.empty_like(flat)
    # One request per server: the push, then (bsp) the pull of its step once every worker's
    # push of the step is applied.
    # (CUDA buckets are staged in the core's pinned pool; see layerps/_arrays.py.)
    h = table.pushpull(change, out)

    def finish(_):
        t.view(-1).copy_(out)
        return t

    return _completer.submit(lambda: h.wait(state.timeout), finish)
