"""DistributedOptimizer's modes 'hybrid' (the default), 'ps' and 'allreduce'
(layerps/torch.py), over layerps/hybrid.py's Hybrid: each parameter is routed by its
gradient's layout at the first step, sparse gradients to the parameter servers (P sparse
tables, the optimizer's rule applied there, lazily), dense ones averaged by the
all-reduce and stepped by the local optimizer; 'ps' and 'allreduce' route every parameter
one way. Every worker starts from rank 0's values (DistributedOptimizer broadcasts them
before building this strategy).

The local optimizer steps the dense parameters after synchronize(); the server-held rows
have no gradient by then, and sparse parameters stepped locally get theirs back to None
so that the next backward produces a sparse one again. Only these modes have routes,
kinds and partitions; ``search_partitions`` tunes P on real training steps.
"""

import time

import torch

from . import hybrid as _hybrid
from . import partition
from ._optimizer_strategy import OptimizerStrategy
from .errors import FailedPreconditionError


class HybridStrategy(OptimizerStrategy):
    """The routes of layerps.hybrid.Hybrid behind the strategy interface."""

    def __init__(self, optimizer, names, params, worker, mode, name, timeout, *, routes, hosts,
                 local_aggregation, partitions, host_pulls):
        self.worker, self.timeout = worker, timeout
        self.hybrid = _hybrid.Hybrid(optimizer, names, params, worker, mode, name, timeout,
                                     routes=routes, hosts=hosts, local_aggregation=local_aggregation,
                                     partitions=partitions, host_pulls=host_pulls)

    def synchronize(self):
        self.hybrid.synchronize()

    def local_step(self, optimizer):
        optimizer.step()  # the dense parameters (server-held rows have no gradient now)
        self.hybrid.after_optimizer_step()

    def finish(self):
        self.hybrid.finish()

    def search_partitions(self, trial, *, steps, warmup, p_min, p_max, names):
        """DistributedOptimizer.search_partitions (see there)."""
        h, w = self.hybrid, self.worker
        sparse = [sp for sp in h.sparse_params if names is None or sp.name in names]
        if not sparse:
            raise FailedPreconditionError("search_partitions: no server-held sparse parameter (after the first step)")
        if p_max is None:
            p_max = min(min(sp.rows for sp in sparse), 16 * w.num_servers)

        def measure(P):
            h.repartition(P, names)
            for _ in range(warmup):
                trial()
            w.barrier("workers", self.timeout)
            t0 = time.perf_counter()
            for _ in range(steps):
                trial()
            t = torch.tensor([(time.perf_counter() - t0) / steps], dtype=torch.float32)
            if w.num_workers > 1:
                w.allreduce(t, self.timeout)  # every worker decides on the same numbers
            return float(t[0]) / w.num_workers

        P, history = partition.search(measure, machines=w.num_servers, p_min=p_min,
                                      p_max=max(p_min, p_max))
        h.repartition(P, names)
        return P, history
