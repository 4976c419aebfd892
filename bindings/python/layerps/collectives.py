"""Typed collectives on numpy arrays and torch tensors: the Python skin of the C++
collectives (docs/collectives.md). Every function is collective: every member of the
process set calls it, in the same order, with matching arguments; a member whose call
differs makes it fail on every member with the same InvalidArgumentError.

Arrays and CPU tensors are used in place (no copy on the way in); CUDA tensors are staged
in the core's pinned pool (ps::PinnedStage: copied down and up by the core on torch's
current stream, never through Python), and results come back on the input's device.
Element types: float32, float16, bfloat16 (torch only), float64, int32, int64, uint8. Each ``*_async`` function returns a :class:`Handle`; ``wait()`` gives
the result.

    from layerps import collectives as C
    C.allreduce(grad, op=C.Average)                      # in place, every worker
    ids = C.allgather(local_ids)                         # concatenated, in rank order
    rows, counts = C.alltoall(rows_for_each, splits=[3, 0, 5])
"""

import numpy as np

from . import _arrays, _core
from .cluster import default_worker
from .errors import InvalidArgumentError

__all__ = ["Sum", "Average", "Min", "Max", "Product", "ProcessSet", "global_process_set", "Handle",
           "allreduce", "allreduce_async", "grouped_allreduce", "grouped_allreduce_async",
           "allgather", "allgather_async", "broadcast", "broadcast_async", "alltoall",
           "alltoall_async", "reducescatter", "reducescatter_async", "barrier", "join"]

# Reduce ops (Horovod's names).
Sum, Average, Min, Max, Product = "sum", "average", "min", "max", "product"

_NUMPY_TYPES = {np.dtype(np.float32): "float32", np.dtype(np.float16): "float16",
                np.dtype(np.float64): "float64", np.dtype(np.int32): "int32",
                np.dtype(np.int64): "int64", np.dtype(np.uint8): "uint8"}
_NUMPY_OF = {v: k for k, v in _NUMPY_TYPES.items()}


class ProcessSet:
    """The worker ranks a collective runs among (Horovod's process sets). ``ranks=None``:
    every worker. Nothing to register: any set of ranks works, the same on every member."""

    def __init__(self, ranks=None):
        self.ranks = None if ranks is None else sorted({int(r) for r in ranks})
        if self.ranks is not None and not self.ranks:
            raise InvalidArgumentError("a process set needs at least one rank")

    def included(self, worker=None):
        w = worker or default_worker()
        return self.ranks is None or w.rank in self.ranks

    def size(self, worker=None):
        w = worker or default_worker()
        return w.num_workers if self.ranks is None else len(self.ranks)

    def rank(self, worker=None):
        """This worker's position in the set (-1 when it is not in it)."""
        w = worker or default_worker()
        if self.ranks is None:
            return w.rank
        return self.ranks.index(w.rank) if w.rank in self.ranks else -1

    def __repr__(self):
        return f"ProcessSet({'all' if self.ranks is None else self.ranks})"


global_process_set = ProcessSet()


def _ranks(process_set):
    if process_set is None:
        return None
    if isinstance(process_set, ProcessSet):
        return process_set.ranks
    return [int(r) for r in process_set]


def _torch():
    try:
        import torch  # noqa: PLC0415 (torch is optional for numpy users)
    except ImportError:
        return None
    return torch


class _Buffer:
    """What the core sees of an array or tensor: a C-contiguous host numpy array and the
    element type's name. A CUDA tensor's array is a block of the core's pinned pool
    (holding its values when ``download``; an output needs none); ``commit()`` enqueues
    the block's copy back into the tensor and returns the caller's array or tensor."""

    def __init__(self, x, what, writable, download=True):
        self.source = x
        self._commit = None  # what commit() runs first: a staged copy's way back, if any
        torch = _torch()
        if torch is not None and isinstance(x, torch.Tensor):
            t = x.detach()
            self.dtype = _torch_type(t.dtype, what)
            self.is_torch = True
            self.device = t.device
            if t.is_cuda:
                if writable and not t.is_contiguous():
                    raise InvalidArgumentError(f"{what}: a CUDA output tensor must be contiguous")
                self.array, self._commit = _arrays.staged_output(t if writable else t.contiguous(), what,
                                                                 download=download)
                return
            if not t.is_contiguous():
                t = t.contiguous()  # a copy, written back by commit()
                self._commit = lambda: x.data.copy_(t.view_as(x))
            self.array = t.view(torch.int16).numpy() if t.dtype == torch.bfloat16 else t.numpy()
        elif isinstance(x, np.ndarray):
            if x.dtype not in _NUMPY_TYPES:
                raise InvalidArgumentError(f"{what}: unsupported dtype {x.dtype} "
                                           f"(float32, float16, float64, int32, int64, uint8)")
            if not x.flags.c_contiguous:
                raise InvalidArgumentError(f"{what}: the array must be C-contiguous")
            if writable and not x.flags.writeable:
                raise InvalidArgumentError(f"{what}: the array is read-only")
            self.dtype = _NUMPY_TYPES[x.dtype]
            self.array = x
            self.is_torch = False
            self.device = None
        else:
            raise InvalidArgumentError(f"{what}: expected a numpy array or a torch tensor, "
                                       f"not {type(x).__name__}")

    def commit(self):
        if self._commit is not None:
            self._commit()
        return self.source


def _torch_type(dtype, what):
    torch = _torch()
    names = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16",
             torch.float64: "float64", torch.int32: "int32", torch.int64: "int64",
             torch.uint8: "uint8"}
    if dtype not in names:
        raise InvalidArgumentError(f"{what}: unsupported tensor dtype {dtype} "
                                   f"(float32, float16, bfloat16, float64, int32, int64, uint8)")
    return names[dtype]


def _empty_like(buf, shape=None):
    """A new output of the input's kind (numpy array, or a tensor on the input's device),
    type and ``shape`` (default the input's)."""
    torch = _torch()
    shape = tuple(buf.array.shape if shape is None else shape)
    if buf.is_torch:
        return torch.empty(shape, dtype=buf.source.dtype, device=buf.device)
    return np.empty(shape, dtype=buf.array.dtype)


def _wire(compression):
    if compression in (None, "none", "fp32"):
        return "fp32"
    name = getattr(compression, "wire", compression)
    if name not in ("fp16", "bf16", "fp32"):
        raise InvalidArgumentError(f"compression must be None, 'fp16' or 'bf16', not {compression!r}")
    return name


class Handle:
    """An asynchronous collective: ``wait(timeout=None)`` returns its result (raising its
    error), ``done()`` says whether it completed. Keep it until then: it holds the buffers."""

    def __init__(self, core_handle, finish):
        self._core = core_handle
        self._finish = finish
        self._result = None
        self._finished = False

    def wait(self, timeout=None):
        if not self._finished:
            raw = self._core.wait(timeout)
            self._result = self._finish(raw)
            self._finished = True
        return self._result

    def done(self):
        return self._finished or self._core.done()


def _common(process_set, algorithm, segment_bytes, timeout, name):
    return dict(ranks=_ranks(process_set), algorithm=str(algorithm),
                segment_bytes=None if segment_bytes is None else int(segment_bytes),
                timeout=timeout, name=str(name or ""))


def allreduce_async(x, out=None, *, op=Sum, prescale=1.0, postscale=1.0, compression=None,
                    process_set=None, algorithm="auto", segment_bytes=None, timeout=None, name=None,
                    worker=None):
    """All-reduce of ``x`` (op: Sum, Average, Min, Max, Product) into ``out`` (None: in
    place). ``compression='fp16'``/``'bf16'`` sends float32 values at 2 bytes (combined in
    float32). The result is ``out``."""
    w = worker or default_worker()
    src = _Buffer(x, "allreduce input", out is None or out is x)
    dst = src if out is None or out is x else _Buffer(out, "allreduce output", True, download=False)
    h = _core.allreduce_async(w._node, src.array, dst.array, src.dtype, op=str(op),
                              prescale=float(prescale), postscale=float(postscale),
                              wire=_wire(compression),
                              **_common(process_set, algorithm, segment_bytes, timeout, name))
    return Handle(h, lambda _: dst.commit())


def allreduce(x, out=None, **kwargs):
    return allreduce_async(x, out, **kwargs).wait()


def grouped_allreduce_async(tensors, outs=None, *, op=Sum, prescale=1.0, postscale=1.0,
                            compression=None, process_set=None, algorithm="auto",
                            segment_bytes=None, timeout=None, name=None, worker=None):
    """All-reduce of many arrays or tensors in one collective (those of one type packed
    together). ``outs`` None: in place. The result is the list of outputs."""
    w = worker or default_worker()
    srcs = [_Buffer(t, f"grouped_allreduce tensor {i}", outs is None) for i, t in enumerate(tensors)]
    dsts = srcs if outs is None else [_Buffer(o, f"grouped_allreduce output {i}", True, download=False)
                                      for i, o in enumerate(outs)]
    if len(dsts) != len(srcs):
        raise InvalidArgumentError("grouped_allreduce: as many outputs as inputs, please")
    h = _core.grouped_allreduce_async(w._node, [s.array for s in srcs], [d.array for d in dsts],
                                      [s.dtype for s in srcs], op=str(op), prescale=float(prescale),
                                      postscale=float(postscale), wire=_wire(compression),
                                      **_common(process_set, algorithm, segment_bytes, timeout, name))
    return Handle(h, lambda _: [d.commit() for d in dsts])


def grouped_allreduce(tensors, outs=None, **kwargs):
    return grouped_allreduce_async(tensors, outs, **kwargs).wait()


def allgather_async(x, *, process_set=None, algorithm="auto", segment_bytes=None, timeout=None,
                    name=None, worker=None):
    """Every member's ``x`` concatenated along the first dimension, in rank order; the
    first dimension may differ between members, the others must not. The result is a new
    array or tensor (a CPU tensor for a CUDA input, moved to its device)."""
    w = worker or default_worker()
    src = _Buffer(x, "allgather input", False)
    row_shape = tuple(src.array.shape[1:])
    row = int(np.prod(row_shape)) if row_shape else 1
    h = _core.allgatherv_async(w._node, src.array.reshape(-1), src.dtype,
                               **_common(process_set, algorithm, segment_bytes, timeout, name))

    def finish(result):
        counts = list(result.counts)
        if row and any(c % row for c in counts):
            raise InvalidArgumentError(f"allgather: the members' tensors differ beyond the first "
                                       f"dimension (element counts {counts}, rows of {row})")
        flat = np.frombuffer(result, dtype=_NUMPY_OF.get(src.dtype, np.int16))  # keeps `result` alive
        shape = (sum(counts) // row if row else 0,) + row_shape
        return _to_kind(src, flat.reshape(shape))

    return Handle(h, finish)


def allgather(x, **kwargs):
    return allgather_async(x, **kwargs).wait()


def _to_kind(src, array):
    """`array` (host numpy, the core's result) as the input's kind: numpy, or a tensor on
    the input's device (_arrays.to_device: a GPU's copied up by the core)."""
    if not src.is_torch:
        return array
    t = _arrays.to_device(array, src.device)
    return t.view(_torch().bfloat16) if src.dtype == "bfloat16" else t


def broadcast_async(x, root_rank, *, process_set=None, algorithm="auto", segment_bytes=None,
                    timeout=None, name=None, worker=None):
    """Every member's ``x`` becomes ``root_rank``'s, in place. The result is ``x``."""
    w = worker or default_worker()
    buf = _Buffer(x, "broadcast", True)
    h = _core.broadcast_async(w._node, buf.array, buf.dtype, int(root_rank),
                              **_common(process_set, algorithm, segment_bytes, timeout, name))
    return Handle(h, lambda _: buf.commit())


def broadcast(x, root_rank, **kwargs):
    return broadcast_async(x, root_rank, **kwargs).wait()


def alltoall_async(x, splits=None, *, process_set=None, algorithm="auto", segment_bytes=None,
                   timeout=None, name=None, worker=None):
    """Sends ``splits[q]`` rows (first dimension) of ``x`` to the q-th member of the set
    (None: equal parts) and returns ``(received, received_splits)``: what every member
    sent to this one, in rank order, and how many rows each."""
    w = worker or default_worker()
    src = _Buffer(x, "alltoall input", False)
    members = (process_set.size(w) if isinstance(process_set, ProcessSet)
               else len(_ranks(process_set)) if process_set is not None else w.num_workers)
    rows = src.array.shape[0] if src.array.ndim else 1
    row_shape = tuple(src.array.shape[1:])
    row = int(np.prod(row_shape)) if row_shape else 1
    if splits is None:
        if rows % members:
            raise InvalidArgumentError(f"alltoall: {rows} rows do not split evenly over {members} members; "
                                       f"pass splits=")
        # Equal parts: the fixed-size exchange, into an output allocated here (no round of
        # lengths, no zero-filled result).
        out = _Buffer(_empty_like(src), "alltoall output", True, download=False)
        h = _core.alltoall_async(w._node, src.array.reshape(-1), out.array.reshape(-1), src.dtype,
                                 **_common(process_set, algorithm, segment_bytes, timeout, name))
        counts = [rows // members] * members

        def finish_equal(_):
            torch = _torch()
            got = torch.tensor(counts, dtype=torch.int32) if src.is_torch else np.array(counts)
            return out.commit(), got

        return Handle(h, finish_equal)
    splits = [int(s) for s in (splits.tolist() if hasattr(splits, "tolist") else splits)]
    if len(splits) != members or any(s < 0 for s in splits) or sum(splits) != rows:
        raise InvalidArgumentError(f"alltoall: splits {splits} must be {members} non-negative row counts "
                                   f"adding up to {rows}")
    h = _core.alltoallv_async(w._node, src.array.reshape(-1), [s * row for s in splits], src.dtype,
                              **_common(process_set, algorithm, segment_bytes, timeout, name))

    def finish(result):
        counts = [c // row if row else 0 for c in result.counts]
        flat = np.frombuffer(result, dtype=_NUMPY_OF.get(src.dtype, np.int16))  # keeps `result` alive
        out = _to_kind(src, flat.reshape((sum(counts),) + row_shape))
        torch = _torch()
        got = torch.tensor(counts, dtype=torch.int32) if src.is_torch else np.array(counts)
        return out, got

    return Handle(h, finish)


def alltoall(x, splits=None, **kwargs):
    return alltoall_async(x, splits, **kwargs).wait()


def reducescatter_async(x, *, op=Sum, prescale=1.0, postscale=1.0, process_set=None,
                        algorithm="auto", segment_bytes=None, timeout=None, name=None, worker=None):
    """The all-reduce of ``x`` (flattened), of which this member keeps its block: the
    result is a new 1-D array or tensor of ``_core.reduce_scatter_block(n, W, position)``
    elements."""
    w = worker or default_worker()
    src = _Buffer(x, "reducescatter input", False)
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(_ranks(process_set))
    n = int(src.array.size)
    block = _core.reduce_scatter_block(n, ps.size(w), ps.rank(w))
    out = _Buffer(_empty_like(src, (block,)), "reducescatter output", True, download=False)
    h = _core.reducescatter_async(w._node, src.array.reshape(-1), out.array, src.dtype, op=str(op),
                                  prescale=float(prescale), postscale=float(postscale),
                                  **_common(process_set, algorithm, segment_bytes, timeout, name))
    return Handle(h, lambda _: out.commit())


def reducescatter(x, **kwargs):
    return reducescatter_async(x, **kwargs).wait()


def barrier(*, process_set=None, timeout=None, name=None, worker=None):
    """Returns once every member of the set called it (worker to worker)."""
    w = worker or default_worker()
    _core.barrier_collective(w._node, ranks=_ranks(process_set), timeout=timeout, name=str(name or ""))


def join(*, process_set=None, timeout=None, worker=None):
    """Horovod's join for the collectives: this member ran out of data. Until every member
    joined it takes part in the others' all-reduces with the op's identity (zeros for a
    sum or an average, which stays divided by the full set). Returns the rank that joined
    last."""
    w = worker or default_worker()
    return _core.join_collectives(w._node, ranks=_ranks(process_set), timeout=timeout)
