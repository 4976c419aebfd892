"""The interface between ``layerps.torch.DistributedOptimizer`` and its modes, and what the
modes share.

DistributedOptimizer checks its arguments, picks one strategy for its mode in
``__init__`` and from then on only delegates: ``synchronize()`` to the strategy's
``synchronize()``, ``step()`` to ``synchronize()`` then ``local_step(optimizer)``,
``finish()`` to ``finish()``. One module per mode (as src/algorithms has one file per
family):

* 'horovod': _allreduce_strategy.py (each gradient all-reduced from its hook);
* 'hybrid', 'ps', 'allreduce': _hybrid_strategy.py (over layerps/hybrid.py);
* 'aggregate': _aggregate_strategy.py (gradients summed in rotating 'sum' tables);
* 'server': _server_strategy.py (the parameters stepped by the servers' 'sgd' rule);
* algorithm=...: _algorithm_strategy.py (the C++ ps::Trainer).

A strategy is built collectively (every worker, same parameters), holds all of its
mode's state, and its ``synchronize()`` is collective. Shared here: the gradient hook
(:func:`on_grad_accumulated`), the per-parameter requests started from it
(:class:`HookedStrategy`, modes 'horovod' and 'aggregate') and the refusal of sparse
gradients by the dense-only modes.
"""

from . import _flat
from .errors import FailedPreconditionError, InvalidArgumentError


class OptimizerStrategy:
    """One mode of DistributedOptimizer. Subclasses implement ``synchronize()``; the
    other hooks have the defaults of a mode whose local optimizer steps the synchronized
    gradients and that leaves nothing in flight."""

    hook_pushes = 0      # mode 'aggregate': pushes started from gradient hooks
    hook_allreduces = 0  # mode 'horovod': all-reduces started from gradient hooks
    trainer = None       # algorithm=...: the layerps.algorithms.Trainer
    hybrid = None        # modes 'hybrid', 'ps', 'allreduce': the layerps.hybrid.Hybrid

    def synchronize(self):
        """This step's communication (collective): afterwards the gradients (or the
        parameters, for modes that update them remotely) are every worker's."""
        raise NotImplementedError

    def local_step(self, optimizer):
        """What DistributedOptimizer.step() does after synchronize(): the wrapped
        optimizer's step by default; nothing where synchronize() updated the parameters."""
        optimizer.step()

    def finish(self):
        """The end of training: waits for what is still in flight (collective where the
        mode says so)."""


def on_grad_accumulated(p, fired):
    """Runs ``fired()`` each time backward has added a gradient to leaf ``p``'s ``.grad``
    (torch >= 2.1's post-accumulate-grad hook; before it, the hook of the leaf's
    AccumulateGrad node, as Horovod does). Returns what must be kept for the hook to stay."""
    if hasattr(p, "register_post_accumulate_grad_hook"):
        return p.register_post_accumulate_grad_hook(lambda *_: fired())
    acc = p.expand_as(p).grad_fn.next_functions[0][0]
    acc.register_hook(lambda *_: fired())
    return acc  # keeps the node (and its hook) alive


class HookedStrategy(OptimizerStrategy):
    """One request per parameter and step, started from the parameter's gradient hook
    once ``backward_passes_per_step`` backward passes have accumulated its gradient (so
    that the requests of the last layers travel while backward computes the first ones);
    ``synchronize()`` starts those no hook started (``overlap=False``, a gradient set by
    hand, no gradient). Subclasses implement ``_start(i)`` (sets ``handles[i]``) and
    ``_drain()`` (forgets the step's handles and passes, waits for the handles)."""

    def __init__(self, params, names, backward_passes_per_step, overlap):
        self.params = params
        self.names = names
        self.passes_per_step = backward_passes_per_step
        self.handles = [None] * len(params)
        self.passes = [0] * len(params)
        self.hook_starts = 0
        self._hooks = []
        if overlap:
            for i, p in enumerate(params):
                self._hooks.append(on_grad_accumulated(p, self._hook(i, p)))

    def _hook(self, i, p):
        def fired():
            if not self._hook_takes(p):
                return
            self.passes[i] += 1
            if self.passes[i] >= self.passes_per_step and self.handles[i] is None:
                self._start(i)
                self.hook_starts += 1

        return fired

    def _hook_takes(self, p):
        """Whether the hook counts (and may start) this gradient."""
        return True

    def _start(self, i):
        raise NotImplementedError

    def _drain(self):
        raise NotImplementedError

    def _check_passes(self):
        """More backward passes than backward_passes_per_step before step(): the request
        left after pass N, so later passes' gradients would be lost. Drains and raises."""
        over = [n for n, c in zip(self.names, self.passes) if c > self.passes_per_step]
        if over:
            self._drain()
            raise FailedPreconditionError(
                f"parameter '{over[0]}': more backward passes than backward_passes_per_step="
                f"{self.passes_per_step} before step() (raise backward_passes_per_step)")

    def _start_missing(self):
        for i in range(len(self.params)):
            if self.handles[i] is None:
                self._start(i)  # no hook started it (overlap off, a grad set by hand, no grad)


def sparse_refused(name, mode):
    """The error of a dense-only mode given a sparse gradient."""
    return InvalidArgumentError(f"parameter '{name}' has a sparse gradient, which mode {mode!r} does not "
                                f"take: use mode='hybrid' (the default)")


def flatten_dense_grads(params, names, buf, mode):
    """The gradients into ``buf`` (layerps/_flat.py); a sparse one raises sparse_refused."""
    def refuse(i):
        raise sparse_refused(names[i], mode)
    _flat.flatten_grads(params, buf, on_sparse=refuse)
