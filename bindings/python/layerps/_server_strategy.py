"""DistributedOptimizer's mode 'server' (layerps/torch.py): the parameters live on the
servers, in one flat dense table with rule 'sgd' (x -= lr * g), and the local optimizer
is not stepped (plain SGD: its momentum and weight decay are not applied).

Each step every worker pushes gradient/N (all parameters fused in one float32 buffer: one
request), meets the others, pulls the updated parameters and meets them again: two
barriers, so that no push of step t+1 reaches a server before everybody pulled step t.
Rank 0's parameters seed the table. Without ``lr=`` the rule follows the param group's
learning rate (an LR scheduler's): a change reaches the servers before the next push
(Worker.set_learning_rate). Sparse gradients are refused.
"""

import torch

from . import _flat
from ._optimizer_strategy import OptimizerStrategy, flatten_dense_grads
from .errors import InvalidArgumentError


class ServerStrategy(OptimizerStrategy):
    """Push gradient/N, barrier, pull the parameters, barrier."""

    def __init__(self, optimizer, params, names, worker, name, lr, timeout):
        self.optimizer = optimizer
        self.params, self.names = params, names
        w = self.worker = worker
        self.timeout = timeout
        total = sum(p.numel() for p in params)
        device = _flat.device_of(params)
        self.gbuf = torch.zeros(total, dtype=torch.float32, device=device)  # gradient/N, pushed
        self.sbuf = torch.zeros(total, dtype=torch.float32, device=device)  # the parameters, pulled
        self.lr_from_groups = lr is None
        if lr is None:
            lr = self._group_lr()
        self.lr = float(lr)
        self.table = w.declare_dense(f"{name}/params", total, "sgd", lr=self.lr)
        if w.rank == 0:
            _flat.flatten_params(params, self.sbuf)
            w.assign(self.table, self.sbuf).wait(timeout)
        w.barrier("workers", timeout)
        w.pull(self.table, self.sbuf).wait(timeout)
        _flat.unflatten_params(params, self.sbuf)
        w.barrier("workers", timeout)

    def _group_lr(self):
        lrs = {g["lr"] for g in self.optimizer.param_groups}
        if len(lrs) != 1:
            raise InvalidArgumentError("mode='server' needs one learning rate: pass lr=")
        return lrs.pop()

    def synchronize(self):
        w, timeout = self.worker, self.timeout
        flatten_dense_grads(self.params, self.names, self.gbuf, "server")
        if self.lr_from_groups:
            lr = float(self._group_lr())
            if lr != self.lr:  # an LR scheduler stepped: the servers' rule follows
                w.set_learning_rate(self.table, lr)
                self.lr = lr
        self.gbuf.mul_(1.0 / w.num_workers)
        w.push(self.table, self.gbuf).wait(timeout)
        w.barrier("workers", timeout)
        w.pull(self.table, self.sbuf).wait(timeout)
        w.barrier("workers", timeout)
        _flat.unflatten_params(self.params, self.sbuf)

    def local_step(self, optimizer):
        pass  # synchronize() loaded the servers' updated parameters
