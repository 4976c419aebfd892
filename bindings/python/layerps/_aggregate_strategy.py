"""DistributedOptimizer's mode 'aggregate' (layerps/torch.py): every worker pushes its
gradient to dense tables with rule 'sum', pulls the sum of all workers' gradients of this
step, divides it by the number of workers and the local optimizer steps it. Any torch
optimizer works; the workers stay equal because they start equal and apply the same
averaged gradient. Sparse gradients are refused (mode 'hybrid' takes them).

One table per parameter, so each parameter's push starts from its gradient hook
(HookedStrategy) and overlaps the rest of backward. The server keeps a running sum
(x += g), so per-step sums come from three tables per parameter used in rotation: step t
pushes to slot t % 3, meets the others at a barrier and pulls it (exactly step t's sum,
no differencing of large running sums); the workers then zero slot t-1 (parameter i's by
rank i % W), which everybody pulled before the barrier of step t and nobody uses again
before step t+2, whose pushes wait for the barrier of step t+1 that each rank enters only
once its zeroing is acknowledged. One barrier per step.
"""

import itertools

import numpy as np
import torch

from . import _flat
from ._optimizer_strategy import HookedStrategy, sparse_refused


class AggregateStrategy(HookedStrategy):
    """Per-parameter pushes to three rotating 'sum' tables, one barrier, pulls."""

    def __init__(self, params, names, worker, name, timeout, *, backward_passes_per_step, overlap):
        w = self.worker = worker
        self.timeout = timeout
        self.numel = [p.numel() for p in params]
        total = sum(self.numel)
        device = _flat.device_of(params)
        self.gbuf = torch.zeros(total, dtype=torch.float32, device=device)  # this worker's gradients, pushed
        self.sbuf = torch.zeros(total, dtype=torch.float32, device=device)  # the sums, pulled
        self.step_count = 0
        self.pending_reset = None  # the zeroing of step t-1's tables, started at step t
        # One table per parameter and rotation slot: step t's pushes go to slot t % 3.
        self.offs = list(itertools.accumulate([0] + self.numel[:-1]))
        self.tables = [[w.declare_dense(f"{name}/grad_sum/{k}/{i}", n, "sum")
                        for i, n in enumerate(self.numel)] for k in range(3)]
        self.zeros = np.zeros(total, dtype=np.float32)
        # The tables may hold sums of an earlier optimizer of the same name: start at 0.
        if w.rank == 0:
            for h in [w.assign(t, self.zeros[o:o + n])
                      for ts in self.tables for t, o, n in zip(ts, self.offs, self.numel)]:
                h.wait(timeout)
        w.barrier("workers", timeout)
        super().__init__(params, names, backward_passes_per_step, overlap)

    @property
    def hook_pushes(self):
        return self.hook_starts

    @hook_pushes.setter
    def hook_pushes(self, value):
        self.hook_starts = value

    def _hook_takes(self, p):
        return p.grad is None or not p.grad.is_sparse  # refused by synchronize(), in parameter order

    def _start(self, i):
        p, off, n = self.params[i], self.offs[i], self.numel[i]
        buf = self.gbuf[off:off + n]
        if p.grad is None:
            buf.zero_()
        else:
            buf.copy_(p.grad.detach().reshape(-1))
        self.handles[i] = self.worker.push(self.tables[self.step_count % 3][i], buf)

    def _drain(self):
        pushes, self.handles = self.handles, [None] * len(self.params)
        self.passes = [0] * len(self.params)
        for h in pushes:
            if h is not None:
                h.wait(self.timeout)

    def synchronize(self):
        w, timeout = self.worker, self.timeout
        k = self.step_count % 3
        for name, p in zip(self.names, self.params):
            if p.grad is not None and p.grad.is_sparse:
                raise sparse_refused(name, "aggregate")
        self._check_passes()
        self._start_missing()
        self._drain()
        if self.pending_reset is not None:
            for h in self.pending_reset:
                h.wait(timeout)  # before the barrier: see the module doc
            self.pending_reset = None
        present = w.barrier("workers", timeout)  # fewer than W once a worker joined
        pulls = [w.pull(t, self.sbuf[o:o + n]) for t, o, n in zip(self.tables[k], self.offs, self.numel)]
        for h in pulls:
            h.wait(timeout)
        # Table i of step t-1 is zeroed by rank i % W (spread so that no worker's link
        # carries them all), acknowledged before that rank enters the next barrier.
        # Once a worker has joined (w.join(): uneven inputs) its share would be left
        # undone: then every worker still present zeroes every table (an assign of
        # zeros is idempotent).
        W = w.num_workers
        everyone = present is not None and present < W
        self.pending_reset = [w.assign(t, self.zeros[o:o + n])
                              for i, (t, o, n) in enumerate(zip(self.tables[(k + 2) % 3], self.offs, self.numel))
                              if everyone or i % W == w.rank]
        self.sbuf.mul_(1.0 / W)
        _flat.unflatten_grads(self.params, self.sbuf)
        self.step_count += 1

    def finish(self):
        if self.pending_reset is not None:
            for h in self.pending_reset:
                h.wait(self.timeout)
            self.pending_reset = None
