"""Flat float32 buffers of a list of parameters, their gradients or their values: what the
modes of ``DistributedOptimizer`` and the hybrid send in one request or one all-reduce.
One copy of these loops for every mode. The buffers live on the parameters' device
(:func:`device_of`): a model on a GPU sends from GPU memory (the worker's device route,
or the core's pinned staging for the collectives), never through a host copy here."""


def device_of(params):
    """The device of the parameters (they must share one), where the flat buffers go."""
    import torch
    devices = {p.device for p in params}
    if len(devices) > 1:
        from .errors import InvalidArgumentError
        raise InvalidArgumentError(f"the parameters lie on several devices ({sorted(map(str, devices))}): "
                                   "one device per DistributedOptimizer")
    return devices.pop() if devices else torch.device("cpu")


def flatten_grads(params, buf, on_sparse=None):
    """Copies each parameter's gradient into ``buf``, in order (zeros for a parameter
    without one). A sparse gradient is made dense, or ``on_sparse(index)`` is called
    (to raise) when given."""
    off = 0
    for i, p in enumerate(params):
        n = p.numel()
        if p.grad is None:
            buf[off:off + n].zero_()
        elif p.grad.is_sparse:
            if on_sparse is not None:
                on_sparse(i)
            buf[off:off + n].copy_(p.grad.to_dense().reshape(-1))
        else:
            buf[off:off + n].copy_(p.grad.detach().reshape(-1))
        off += n


def unflatten_grads(params, buf):
    """Each parameter's gradient becomes its slice of ``buf`` (copied into the gradient
    it has, or a new dense one where it had none or a sparse one)."""
    off = 0
    for p in params:
        n = p.numel()
        g = buf[off:off + n].view_as(p)
        if p.grad is None or p.grad.is_sparse:
            p.grad = g.clone().to(p.device)
        else:
            p.grad.copy_(g)
        off += n


def flatten_params(params, buf):
    """Copies each parameter's values into ``buf``, in order."""
    off = 0
    for p in params:
        n = p.numel()
        buf[off:off + n].copy_(p.detach().reshape(-1))
        off += n


def unflatten_params(params, buf):
    """Each parameter's values become its slice of ``buf`` (no autograd record)."""
    import torch
    off = 0
    with torch.no_grad():
        for p in params:
            n = p.numel()
            p.copy_(buf[off:off + n].view_as(p))
            off += n
