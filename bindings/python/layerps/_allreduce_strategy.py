"""DistributedOptimizer's mode 'horovod' (layerps/torch.py): Horovod's data parallelism on
the typed all-reduce. Each parameter's gradient is all-reduced, in place, from a hook that
fires as soon as backward has accumulated it (so the all-reduces of the last layers travel
while backward computes the first ones); ``synchronize()`` starts what no hook started
(parameters without a gradient count as zeros, as in Horovod) and waits for all of them.

The all-reduces of every worker must start in the same order: the order backward produces
the gradients, the same on every worker for the same model. A worker whose order differs
makes the step fail on every worker with the same InvalidArgumentError naming the first
parameter (tensor name) that differs.
"""

import torch

from . import collectives as _C
from ._optimizer_strategy import HookedStrategy
from .errors import InvalidArgumentError


class AllreduceStrategy(HookedStrategy):
    """One all-reduce per parameter per step, started from its gradient hook."""

    def __init__(self, params, names, worker, *, compression, op, gradient_predivide_factor,
                 process_set, backward_passes_per_step, overlap, timeout):
        if op not in (_C.Average, _C.Sum, _C.Min, _C.Max, _C.Product):
            raise InvalidArgumentError(f"op must be Average, Sum, Min, Max or Product, not {op!r}")
        f = float(gradient_predivide_factor)
        if not f > 0:
            raise InvalidArgumentError("gradient_predivide_factor must be > 0")
        if f != 1.0 and op != _C.Average:
            raise InvalidArgumentError("gradient_predivide_factor applies to op=Average only (as Horovod's)")
        self.worker = worker
        self.wire = getattr(compression, "wire", None)
        self.process_set = process_set
        self.timeout = timeout
        size = (process_set.size(worker) if isinstance(process_set, _C.ProcessSet)
                else worker.num_workers if process_set is None else len(list(process_set)))
        # Horovod: with a predivide factor f, the gradients are summed after dividing by f
        # and the sum multiplied by f / size.
        if f != 1.0:
            self.op, self.prescale, self.postscale = _C.Sum, 1.0 / f, f / size
        else:
            self.op, self.prescale, self.postscale = op, 1.0, 1.0
        super().__init__(params, names, backward_passes_per_step, overlap)

    @property
    def hook_allreduces(self):
        return self.hook_starts

    def _start(self, i):
        p = self.params[i]
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        elif p.grad.is_sparse:
            p.grad = p.grad.to_dense()  # Horovod's sparse_as_dense
        wire = self.wire if p.grad.dtype == torch.float32 else None
        self.handles[i] = _C.allreduce_async(p.grad, None, op=self.op, prescale=self.prescale,
                                             postscale=self.postscale, compression=wire,
                                             process_set=self.process_set, name=self.names[i],
                                             timeout=self.timeout, worker=self.worker)

    def synchronize(self):
        self._check_passes()
        self._start_missing()
        self._drain()

    def _drain(self):
        """Waits for every handle (the all-reduces carry their timeout), then raises the
        first failure."""
        handles, self.handles = self.handles, [None] * len(self.params)
        self.passes = [0] * len(self.params)
        first = None
        for h in handles:
            if h is None:
                continue
            try:
                h.wait()
            except Exception as e:  # noqa: BLE001 (every handle is waited for first)
                first = first or e
        if first is not None:
            raise first
