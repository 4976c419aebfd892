"""DistributedOptimizer's ``algorithm=...`` (layerps/torch.py): one of the seven training
algorithms of docs/algorithms.md ('bsp', 'asp', 'ssp(s)', 'easgd(tau,alpha)', 'arsgd',
'gosgd(p)', 'adpsgd'), run by the C++ ``ps::Trainer`` (layerps.algorithms.Trainer).

The wrapped optimizer must be a ``torch.optim.SGD``: the trainer runs SGD itself, with its
lr, momentum and nesterov (one setting for every group; dampening and weight_decay 0), so
the local optimizer is not stepped. The parameters are moved into one flat float32 buffer
that the algorithm (and its communication thread) updates in place: each ``p.data``
becomes a view of it. A step hands the trainer this worker's gradients, fused in one
buffer; ``finish()`` is the collective end of training (drains gossips and averagings).
Sparse gradients are refused.
"""

import torch

from . import _flat
from ._optimizer_strategy import OptimizerStrategy, flatten_dense_grads
from .algorithms import Trainer
from .errors import InvalidArgumentError


class AlgorithmStrategy(OptimizerStrategy):
    """The gradients to a layerps.algorithms.Trainer that updates the parameters in place."""

    def __init__(self, optimizer, params, names, worker, algorithm, *, lr, name, timeout,
                 warmup_steps, decay, gamma, decay_every, seed):
        if not isinstance(optimizer, torch.optim.SGD):
            raise InvalidArgumentError(
                f"algorithm={algorithm!r} runs SGD (momentum, Nesterov, warm-up, decay): wrap a "
                f"torch.optim.SGD, not {type(optimizer).__name__}")
        settings = {(g["lr"], g.get("momentum", 0.0), bool(g.get("nesterov", False)),
                     g.get("dampening", 0.0), g.get("weight_decay", 0.0)) for g in optimizer.param_groups}
        if len(settings) != 1:
            raise InvalidArgumentError("algorithm=...: every param group needs the same lr, momentum and nesterov")
        group_lr, momentum, nesterov, dampening, weight_decay = settings.pop()
        if dampening != 0 or weight_decay != 0:
            raise InvalidArgumentError("algorithm=...: the SGD optimizer's dampening and weight_decay must be 0")
        if _flat.device_of(params).type != "cpu":
            raise InvalidArgumentError(
                f"algorithm={algorithm!r} keeps the model in one host buffer that the algorithm's "
                f"communication thread updates in place: the parameters must be on the CPU, not "
                f"{_flat.device_of(params)} (for a model on a GPU use mode='hybrid', 'horovod', 'aggregate' "
                f"or 'server')")
        self.params, self.names = params, names
        total = sum(p.numel() for p in params)
        self.gbuf = torch.zeros(total, dtype=torch.float32)  # this worker's gradients
        # One flat buffer holds the model; each parameter becomes a view of it, so the
        # algorithm (and its communication thread) updates the model in place.
        flat = torch.empty(total, dtype=torch.float32)
        _flat.flatten_params(params, flat)
        with torch.no_grad():
            off = 0
            for p in params:
                n = p.numel()
                p.data = flat[off:off + n].view_as(p)
                off += n
        self.flat = flat
        self.trainer = Trainer(flat, algorithm, lr=float(lr if lr is not None else group_lr),
                               momentum=float(momentum), nesterov=nesterov,
                               warmup_steps=warmup_steps, decay=decay, gamma=gamma,
                               decay_every=decay_every, name=name, seed=seed, timeout=timeout,
                               worker=worker)

    def synchronize(self):
        flatten_dense_grads(self.params, self.names, self.gbuf, "algorithm")
        self.trainer.step(self.gbuf)

    def local_step(self, optimizer):
        pass  # the trainer updated the parameters in place

    def finish(self):
        self.trainer.finish()
