"""DistributedOptimizer: a torch.optim.Optimizer that synchronizes the gradients (or the
parameters) through the cluster at step(), by one strategy object per mode
(layerps/_optimizer_strategy.py)."""

import itertools

import torch

from .. import hybrid as _hybrid
from .._aggregate_strategy import AggregateStrategy as _AggregateStrategy
from .._algorithm_strategy import AlgorithmStrategy as _AlgorithmStrategy
from .._allreduce_strategy import AllreduceStrategy as _AllreduceStrategy
from .._hybrid_strategy import HybridStrategy as _HybridStrategy
from .._server_strategy import ServerStrategy as _ServerStrategy
from ..errors import FailedPreconditionError, InvalidArgumentError
from ._common import named_tensors as _named_tensors
from ._common import worker_or_default as _worker
from .ops import Average, broadcast_parameters

_MODES = ("hybrid", "ps", "allreduce", "aggregate", "server", "horovod")


class DistributedOptimizer(torch.optim.Optimizer):
    """Wraps ``optimizer`` so that ``step()`` first synchronizes the gradients (or the
    parameters) of ``named_parameters`` through the cluster. Collective: every worker
    builds it with the same parameters (names, shapes, order) and steps together.
    docs/python.md ("PyTorch: layerps.torch" and its sections) describes every mode and
    parameter in full; in short:

    ``optimizer``: the torch optimizer to wrap (any, except as said for ``algorithm``).
    ``named_parameters``: ``model.named_parameters()``, a dict or tensors (default: the
    optimizer's parameters, named param0, param1...); those that require a gradient are
    synchronized, all float32. ``worker``: default, layerps.init()'s. ``name``: the
    prefix of the tables it declares (workers must agree). ``timeout``: seconds for each
    wait (None: no limit). ``lr``: the learning rate instead of the param group's, in mode
    'server' (the servers' rule) and with ``algorithm`` (the trainer's).

    ``mode``:

    * 'horovod' (the default when ``compression``, ``op``, ``gradient_predivide_factor``
      or ``process_set`` is given, which belong to it alone): Horovod's data parallelism,
      each gradient all-reduced in place (op Average by default, over ``process_set``;
      ``compression=Compression.fp16`` sends float32 at 2 bytes;
      ``gradient_predivide_factor=f`` sums grad/f and multiplies by f/size) from its
      gradient hook; ``step()`` waits and steps the wrapped optimizer.
    * 'hybrid' (default otherwise), 'ps', 'allreduce': sparse gradients through the
      servers, dense ones through the all-reduce, per parameter at the first step
      (docs/python.md "The hybrid"); ``routes`` ({name: 'ps' | 'allreduce' |
      'allgather'}), ``hosts`` (a host label per rank), ``local_aggregation``,
      ``host_pulls`` and ``partitions`` (P, an int or {name: P}) belong to these three.
    * 'aggregate': gradients summed in rotating 'sum' tables on the servers, averaged and
      stepped by the local optimizer.
    * 'server': the parameters live on the servers (rule 'sgd'; plain SGD), the local
      optimizer is not stepped.

    ``algorithm`` ('bsp', 'asp', 'ssp(s)', 'easgd(tau,alpha)', 'arsgd', 'gosgd(p)',
    'adpsgd'; instead of ``mode``): one of the C++ trainers (docs/algorithms.md) over a
    ``torch.optim.SGD``, with ``warmup_steps``, ``decay`` ('none', 'step', 'exponential',
    'cosine'), ``gamma``, ``decay_every`` and ``seed`` (of the gossip partners); ``p.data``
    becomes a view of one flat buffer that the trainer updates in place.

    ``backward_passes_per_step=N``: N backward passes accumulate before each ``step()``.
    ``overlap`` (modes 'horovod' and 'aggregate'): start each gradient's communication
    from its hook during backward (False: all from ``step()``). A parameter without a
    gradient counts as a zero gradient.

    It is a ``torch.optim.Optimizer`` sharing the wrapped optimizer's ``param_groups``,
    ``state`` and ``defaults`` (LR schedulers take it); ``state_dict()``,
    ``load_state_dict()`` and ``zero_grad()`` are the wrapped one's, ``.optimizer``.
    Call ``finish()`` at the end of training.
    """

    def __init__(self, optimizer, named_parameters=None, *, worker=None, mode=None,
                 name="model", lr=None, timeout=None, algorithm=None, warmup_steps=0,
                 decay="none", gamma=0.1, decay_every=0, seed=0, routes=None, hosts=None,
                 local_aggregation=True, partitions=None, backward_passes_per_step=1,
                 overlap=True, host_pulls=False, compression=None, op=None,
                 gradient_predivide_factor=None, process_set=None):
        if algorithm is not None and mode is not None:
            raise InvalidArgumentError("pass either mode= or algorithm=, not both")
        horovod_args = {k: v for k, v in (("compression", compression), ("op", op),
                                          ("gradient_predivide_factor", gradient_predivide_factor),
                                          ("process_set", process_set)) if v is not None}
        if mode is None and algorithm is None:
            # Horovod's all-reduce arguments ask for Horovod's mode; else the hybrid.
            mode = "horovod" if horovod_args else "hybrid"
        if horovod_args and mode != "horovod":
            raise InvalidArgumentError(f"{', '.join(horovod_args)}= belong to mode 'horovod' (Horovod's "
                                       f"all-reduce), not {mode!r}")
        if algorithm is not None:
            mode = "algorithm"
        elif mode not in _MODES:
            raise InvalidArgumentError(f"mode must be one of {', '.join(repr(m) for m in _MODES)}, not {mode!r}")
        if mode not in _hybrid.MODES and (routes is not None or hosts is not None or partitions is not None
                                          or host_pulls):
            raise InvalidArgumentError("routes=, hosts=, partitions= and host_pulls= belong to modes 'hybrid', "
                                       "'ps' and 'allreduce'")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise InvalidArgumentError(f"optimizer must be a torch.optim.Optimizer, not {type(optimizer).__name__}")
        if int(backward_passes_per_step) < 1:
            raise InvalidArgumentError("backward_passes_per_step must be >= 1")
        # A real torch.optim.Optimizer whose groups, state and defaults are the wrapped
        # optimizer's own objects (as Horovod's wrapper shares them).
        torch.optim.Optimizer.__init__(
            self, [{"params": list(g["params"])} for g in optimizer.param_groups], dict(optimizer.defaults))
        self.optimizer = optimizer  # from here on param_groups, state, defaults are its own
        self._wrapping_done = True
        self.backward_passes_per_step = int(backward_passes_per_step)
        self.overlap = bool(overlap)
        self.worker = w = _worker(worker)
        self.mode = mode
        self.timeout = timeout
        if named_parameters is None:
            named_parameters = [(f"param{i}", p) for i, p in enumerate(
                itertools.chain.from_iterable(g["params"] for g in optimizer.param_groups))]
        items = [(n, p) for n, p in _named_tensors(named_parameters, "named_parameters") if p.requires_grad]
        if not items:
            raise InvalidArgumentError("DistributedOptimizer: no parameter requires a gradient")
        for n, p in items:
            if p.dtype != torch.float32:
                raise InvalidArgumentError(f"parameter '{n}': expected float32, got {p.dtype}")
        params = [p for _, p in items]
        names = [n for n, _ in items]
        # The mode's strategy (layerps/_optimizer_strategy.py), chosen once: from here on
        # synchronize(), step() and finish() only delegate to it.
        if mode == "horovod":
            self._strategy = _AllreduceStrategy(
                params, names, w, compression=compression,
                op=Average if op is None else op,
                gradient_predivide_factor=1.0 if gradient_predivide_factor is None else gradient_predivide_factor,
                process_set=process_set, backward_passes_per_step=self.backward_passes_per_step,
                overlap=self.overlap, timeout=timeout)
        elif mode in _hybrid.MODES:
            # Every worker starts from rank 0's values; the routes are decided at the first
            # step, from the gradients' layouts (layerps/hybrid.py).
            broadcast_parameters(items, 0, worker=w, timeout=timeout)
            self._strategy = _HybridStrategy(optimizer, names, params, w, mode, name, timeout, routes=routes,
                                             hosts=hosts, local_aggregation=local_aggregation,
                                             partitions=partitions, host_pulls=host_pulls)
        elif mode == "algorithm":
            self._strategy = _AlgorithmStrategy(optimizer, params, names, w, algorithm, lr=lr, name=name,
                                                timeout=timeout, warmup_steps=warmup_steps, decay=decay,
                                                gamma=gamma, decay_every=decay_every, seed=seed)
        elif mode == "aggregate":
            self._strategy = _AggregateStrategy(params, names, w, name, timeout,
                                                backward_passes_per_step=self.backward_passes_per_step,
                                                overlap=self.overlap)
        else:
            self._strategy = _ServerStrategy(optimizer, params, names, w, name, lr, timeout)

    # --- forwarding ----------------------------------------------------------------------
    # param_groups, state and defaults are the wrapped optimizer's attributes, read and
    # written through (its load_state_dict rebinds them: they must never be copies).
    # Before the wrapped optimizer is attached (torch.optim.Optimizer.__init__) they are
    # this object's own.
    def _forwarded(name):
        def get(self):
            opt = self.__dict__.get("optimizer")
            return getattr(opt, name) if opt is not None else self.__dict__.get("_own_" + name)

        def put(self, value):
            opt = self.__dict__.get("optimizer")
            if opt is not None:
                setattr(opt, name, value)
            else:
                self.__dict__["_own_" + name] = value

        return property(get, put)

    param_groups = _forwarded("param_groups")
    state = _forwarded("state")
    defaults = _forwarded("defaults")
    del _forwarded

    def zero_grad(self, set_to_none=False):
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def add_param_group(self, param_group):
        if not getattr(self, "_wrapping_done", False):  # torch.optim.Optimizer.__init__
            return super().add_param_group(param_group)
        # Not synchronized: the tables are laid out at construction.
        raise FailedPreconditionError("DistributedOptimizer: add the param group to the wrapped optimizer "
                                      "before wrapping it")

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, state):
        self.optimizer.load_state_dict(state)

    # --- the step ------------------------------------------------------------------------
    def step(self, closure=None):
        """Synchronizes through the cluster, then (aggregate mode) steps the optimizer."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.synchronize()
        self._strategy.local_step(self.optimizer)
        return loss

    def synchronize(self):
        """Aggregate mode: replaces every .grad by the average over the workers of this
        step's gradients. Server mode: applies the step on the servers and loads the new
        parameters. Collective."""
        self._strategy.synchronize()

    @property
    def hook_pushes(self):
        """Mode 'aggregate': the pushes started from gradient hooks so far."""
        return self._strategy.hook_pushes

    @hook_pushes.setter
    def hook_pushes(self, value):
        self._strategy.hook_pushes = value

    @property
    def hook_allreduces(self):
        """Mode 'horovod': the all-reduces started from gradient hooks so far."""
        return self._strategy.hook_allreduces

    @property
    def lr(self):
        """Mode 'server': the learning rate of the servers' rule."""
        try:
            return self._strategy.lr
        except AttributeError:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute 'lr'") from None

    @property
    def trainer(self):
        """The layerps.algorithms.Trainer under algorithm=... (None in the other modes)."""
        return self._strategy.trainer

    def finish(self):
        """Waits for the last background request (call before the worker stops); with
        algorithm=..., the collective end of training (drains gossips and averagings)."""
        self._strategy.finish()

    # --- the hybrid (modes 'hybrid', 'ps', 'allreduce') ----------------------------------------
    def _need_hybrid(self, what):
        if self._strategy.hybrid is None:
            raise FailedPreconditionError(f"{what} belongs to modes 'hybrid', 'ps' and 'allreduce'")
        return self._strategy.hybrid

    @property
    def routes(self):
        """{parameter name: 'ps' or 'allreduce'}, decided at the first step."""
        return self._need_hybrid("routes").routes

    @property
    def kinds(self):
        """{parameter name: 'sparse' or 'dense'}: its gradients' layout at the first step."""
        return self._need_hybrid("kinds").kinds

    @property
    def partitions(self):
        """{name of a server-held sparse parameter: its number of partitions P}."""
        return self._need_hybrid("partitions").partitions

    @property
    def hybrid(self):
        """The layerps.hybrid.Hybrid doing the synchronization (None in the other modes)."""
        return self._strategy.hybrid

    def repartition(self, partitions, names=None):
        """Moves the server-held sparse parameters (all, or those ``names``) to
        ``partitions`` partitions without losing a row (collective, between steps; the
        rules' server-side state restarts). 0 or more partitions than rows is refused."""
        self._need_hybrid("repartition").repartition(partitions, names)

    def pull_sparse_params(self):
        """Copies the server-held rows into the local weights (e.g. before saving)."""
        self._need_hybrid("pull_sparse_params").pull_sparse_params()

    def search_partitions(self, trial, *, steps=3, warmup=1, p_min=1, p_max=None, names=None):
        """Tunes P by trial steps (layerps.partition.search): for each P tried, repartition,
        run ``warmup`` then ``steps`` calls of ``trial()`` (one training step: forward,
        backward, this optimizer's step), and take the workers' mean seconds per step.
        Collective. Leaves the tables at the chosen P; returns (P, [(P, seconds)...])."""
        self._need_hybrid("search_partitions")
        return self._strategy.search_partitions(trial, steps=steps, warmup=warmup, p_min=p_min, p_max=p_max,
                                                names=names)
