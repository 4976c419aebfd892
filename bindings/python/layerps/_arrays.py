"""Turning numpy arrays and torch tensors into what layerps._core accepts.

Values must be float32. A C-contiguous float32 numpy array or CPU torch tensor is passed
as it is (no copy: the C++ worker reads or writes its memory). Inputs (pushed gradients,
assigned values) that are float32 but not contiguous are copied once; outputs (pull
targets) must be usable in place, or the call fails. CUDA tensors take the device route
where a call has one (device_args: the core's device calls, on torch's current stream);
elsewhere they are staged in the core's pinned pool (stage_in, staged_output:
ps::PinnedStage, copied down and up on torch's current stream by the core), never copied
to the host in Python. A wrong dtype is always an error, never a silent conversion.

Keys may be uint64 or int64 (passed without a copy; int64 ids are reinterpreted as
their two's complement uint64), or another integer dtype (copied to uint64).
"""

import sys

import numpy as np

from . import _core
from .errors import InvalidArgumentError


def _torch():
    return sys.modules.get("torch")


def is_tensor(x):
    t = _torch()
    return t is not None and isinstance(x, t.Tensor)


def is_cuda(x):
    """True for a torch tensor in GPU memory (the device route: no copy to the host)."""
    return is_tensor(x) and x.device.type == "cuda"


def device_args(x, what, *, dtype="float32", writable=False):
    """(data_ptr, numel, stream) of a CUDA tensor for the core's device calls: float32 (or
    a 64-bit integer type for keys), contiguous; the stream is torch's current stream on
    the tensor's device, so the core's copies and kernels are ordered after the caller's
    work on it."""
    t = _torch()
    if dtype == "float32" and x.dtype != t.float32:
        raise InvalidArgumentError(f"{what}: expected a float32 tensor, got {x.dtype}")
    if dtype == "keys" and x.dtype not in (t.int64, getattr(t, "uint64", t.int64)):
        raise InvalidArgumentError(f"{what}: expected int64 keys on the GPU, got {x.dtype}")
    if not x.is_contiguous():
        if writable:
            raise InvalidArgumentError(f"{what}: the output tensor must be contiguous")
        x = x.contiguous()
    return x, x.data_ptr(), x.numel(), current_stream(x)


def _numpy_dtype(tensor):
    """The numpy type the core sees for a tensor's elements (bfloat16 as its int16 bits)."""
    t = _torch()
    if tensor.dtype == t.bfloat16:
        return np.dtype(np.int16)
    return t.empty(0, dtype=tensor.dtype).numpy().dtype


def current_stream(x):
    """torch's current stream on a CUDA tensor's device, as the integer the core takes."""
    return _torch().cuda.current_stream(x.device).cuda_stream


def _stage(x, download):
    """(block, array): a block of the core's pinned pool as a numpy array of x's shape
    and element type; with ``download``, holding x's values (copied down by the core on
    torch's current stream, which it waits for). The array keeps the block alive."""
    if download:
        x = x.detach().contiguous()
        stage = _core.PinnedStage.from_device(x.data_ptr(), x.numel() * x.element_size(),
                                              current_stream(x))
    else:
        stage = _core.PinnedStage.allocate(x.numel() * x.element_size())
    return stage, np.frombuffer(stage, dtype=_numpy_dtype(x), count=x.numel()).reshape(x.shape)


def stage_in(x):
    """A CUDA tensor's values in a block of the core's pinned pool, as a numpy array of
    x's shape (see _stage)."""
    return _stage(x, True)[1]


def staged_output(x, what, *, download=False):
    """(array, commit) for a CUDA tensor the core writes: ``array`` lies in a block of the
    pinned pool (holding x's values when ``download``, else uninitialized); ``commit()``
    enqueues its copy into x on the stream that was current at this call and returns x."""
    if not x.is_contiguous():
        raise InvalidArgumentError(f"{what}: the output tensor must be contiguous")
    stream = current_stream(x)
    nbytes = x.numel() * x.element_size()
    stage, array = _stage(x, download)

    def commit():
        stage.to_device(x.data_ptr(), nbytes, stream)
        return x

    return array, commit


def as_input(x, what):
    """A float32 C-contiguous numpy array with x's values (shares x's memory if it can; a
    CUDA tensor's values staged in the core's pinned pool)."""
    if is_tensor(x):
        t = _torch()
        if x.dtype != t.float32:
            raise InvalidArgumentError(f"{what}: expected a float32 tensor, got {x.dtype}")
        x = x.detach()
        if x.device.type == "cuda":
            return stage_in(x)
        if not x.is_contiguous():
            x = x.contiguous()
        return x.numpy()
    if isinstance(x, np.ndarray):
        if x.dtype != np.float32:
            raise InvalidArgumentError(f"{what}: expected float32 values, got dtype {x.dtype}")
        return np.ascontiguousarray(x)
    if isinstance(x, (list, tuple)):
        return np.asarray(x, dtype=np.float32)
    raise InvalidArgumentError(
        f"{what}: expected a numpy array or a torch tensor, got {type(x).__name__}")


def output(x, what, *, download=False):
    """(array, commit) for an output: as_output's view and None, or for a CUDA tensor
    staged_output's pinned array and the commit that copies it up."""
    if is_cuda(x):
        if x.dtype != _torch().float32:
            raise InvalidArgumentError(f"{what}: expected a float32 tensor, got {x.dtype}")
        return staged_output(x, what, download=download)
    return as_output(x, what), None


def as_output(x, what):
    """A numpy view of x that the worker may write into (x's memory, never a copy). CUDA
    tensors are outputs through output() only."""
    if is_tensor(x):
        t = _torch()
        if x.dtype != t.float32:
            raise InvalidArgumentError(f"{what}: expected a float32 tensor, got {x.dtype}")
        if x.device.type != "cpu":
            raise InvalidArgumentError(f"{what}: the output tensor must be on the CPU, not {x.device}")
        if not x.is_contiguous():
            raise InvalidArgumentError(f"{what}: the output tensor must be contiguous")
        return x.detach().numpy()
    if isinstance(x, np.ndarray):
        if x.dtype != np.float32:
            raise InvalidArgumentError(f"{what}: expected float32 values, got dtype {x.dtype}")
        if not x.flags.c_contiguous:
            raise InvalidArgumentError(f"{what}: the output array must be C-contiguous")
        if not x.flags.writeable:
            raise InvalidArgumentError(f"{what}: the output array is read-only")
        return x
    raise InvalidArgumentError(
        f"{what}: expected a numpy array or a torch tensor, got {type(x).__name__}")


def as_keys(keys):
    """A 1-D C-contiguous 64-bit integer numpy array (uint64 or int64)."""
    if is_tensor(keys):
        t = _torch()
        if keys.is_floating_point() or keys.is_complex() or keys.dtype == t.bool:
            raise InvalidArgumentError(f"keys: expected an integer tensor, got {keys.dtype}")
        keys = keys.detach()
        if keys.dtype != t.int64:
            keys = keys.to(t.int64)
        if keys.device.type == "cuda":
            return stage_in(keys.reshape(-1))
        keys = keys.reshape(-1).contiguous().numpy()
    elif isinstance(keys, (list, tuple)):
        keys = np.asarray(keys)
        if keys.size == 0:
            keys = keys.astype(np.uint64)
    elif not isinstance(keys, np.ndarray):
        raise InvalidArgumentError(
            f"keys: expected an integer numpy array or tensor, got {type(keys).__name__}")
    if keys.dtype.kind not in "ui":
        raise InvalidArgumentError(f"keys: expected integer keys, got dtype {keys.dtype}")
    if keys.ndim != 1:
        keys = keys.reshape(-1)
    if keys.dtype.itemsize != 8:
        keys = keys.astype(np.int64 if keys.dtype.kind == "i" else np.uint64)
    return np.ascontiguousarray(keys)


def to_device(array, device):
    """A host numpy array (a result the core returned) as a tensor on ``device``: the
    array itself as a CPU tensor, or a new GPU tensor the core copies it into (on torch's
    current stream, which it waits for)."""
    t = _torch()
    array = np.ascontiguousarray(array)
    host = t.from_numpy(array)
    if device is None or t.device(device).type == "cpu":
        return host
    out = t.empty(host.shape, dtype=host.dtype, device=device)
    _core.copy_host_to_device(array.reshape(-1).view(np.uint8), out.data_ptr(), current_stream(out))
    return out


def host_view(x):
    """A tensor's values as a C-contiguous host numpy array: a CPU tensor's own memory
    (contiguous), a CUDA tensor's staged in the core's pinned pool (stage_in)."""
    if is_cuda(x):
        return stage_in(x)
    return x.detach().contiguous().numpy()
