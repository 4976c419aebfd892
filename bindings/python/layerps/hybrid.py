"""The sparsity-aware hybrid behind ``layerps.torch.DistributedOptimizer(mode='hybrid')``
(also its pure modes 'ps' and 'allreduce').

Each parameter is routed, at the first step, by the layout of its gradient:

* sparse (``nn.Embedding(sparse=True)``, ``nn.EmbeddingBag(sparse=True)``: a COO gradient
  touching some rows) -> the parameter servers. The rows live in P sparse tables
  (partition k holds the rows r with r mod P == k and is pinned to server k mod M), with
  the server-side rule of the torch optimizer (sgd, momentum, nesterov, adagrad, adam;
  lazy: only touched rows step). The embedding module's forward first pulls the batch's
  unique rows into the local weight (a forward pre-hook); step pushes only the touched
  rows' gradient (averaged over the workers).
* dense -> ``Worker.allreduce`` among the workers, averaged; the local optimizer steps it.

``routes={"name": "ps" | "allreduce" | "allgather"}`` overrides a parameter: a dense parameter routed
to "ps" goes through three rotating 'sum' tables (the aggregate mode's scheme) and is
stepped locally; a sparse one routed to "allreduce" is densified and all-reduced, and
one routed to "allgather" is sent, as rows, to every other worker (what all-reduce
systems do with sparse gradients), summed and stepped locally.

Local aggregation (default on): the workers of a host (``Worker.nodes()`` hostnames, or
``hosts=``) all-reduce dense gradients among themselves first, one leader per host
all-reduces across hosts and sends the result to its host; sparse gradients go to the
host leader, which coalesces them (unique rows, summed) and pushes once per host.
With ``host_pulls=True`` the lookups are aggregated too: during training forwards (grad
enabled, module in training mode) each worker of a host sends its batch's unique row ids
to the leader, which pulls the union once and hands every worker its rows. Every worker
of the host must then look up each embedding in the same order, as data parallelism
does anyway; forwards without grad or in eval mode pull on their own.

A rule other than plain SGD is not linear in the gradient, so a row must receive one
push per step: when more than one worker (or host leader) pushes, the pushers first
exchange rows so that each row is pushed by one of them (its owner, by row id).
"""

import threading

import torch

from . import _core
from . import _flat
from ._arrays import host_view, to_device
from .collectives import broadcast
from .errors import FailedPreconditionError, InvalidArgumentError
from .partition import check_partitions

ROUTES = ("ps", "allreduce", "allgather")
MODES = ("hybrid", "ps", "allreduce")
_CHUNK_ROWS = 1 << 16  # rows per request when copying whole tables


# --- the row exchanges: the C++ core's (ps/sparse_exchange.h), on torch tensors ----------
# CUDA ids and rows are staged in the core's pinned pool and the results copied up to
# their device by the core (layerps/_arrays.py), never through a host copy here.
def _rows_args(ids, rows):
    return host_view(ids), host_view(rows.detach().to(torch.float32))


def _as_rows(result, device):
    ids, rows = result
    return to_device(ids, device), to_device(rows, device)


# --- the lookup hook: pulls a PS-held embedding's rows before the module uses them -------
class _Tracked:
    """A parameter watched by the lookup hook: whether a module looked it up this step,
    and, once it is held by the servers, its _SparseParam (which pulls the rows)."""

    __slots__ = ("param", "looked_up", "sparse")

    def __init__(self, param):
        self.param = param
        self.looked_up = False
        self.sparse = None


_managed = {}  # id(weight) -> _Tracked
_managed_lock = threading.Lock()
_hook_handle = None


def _lookup_hook(module, inputs):
    if not isinstance(module, (torch.nn.Embedding, torch.nn.EmbeddingBag)):
        return None
    weight = getattr(module, "weight", None)
    t = _managed.get(id(weight))
    if t is not None and t.param is weight:
        t.looked_up = True
        if t.sparse is not None:
            t.sparse.before_lookup(module, inputs)
    return None


def _manage(tracked):
    global _hook_handle
    with _managed_lock:
        _managed[id(tracked.param)] = tracked
        if _hook_handle is None:
            from torch.nn.modules.module import register_module_forward_pre_hook
            _hook_handle = register_module_forward_pre_hook(_lookup_hook)


def _unmanage(tracked):
    global _hook_handle
    with _managed_lock:
        if _managed.get(id(tracked.param)) is tracked:
            del _managed[id(tracked.param)]
        if not _managed and _hook_handle is not None:
            _hook_handle.remove()
            _hook_handle = None


# --- server-side rules from torch optimizers --------------------------------------------
def server_rule(optimizer, param, name):
    """(rule, keyword arguments of declare_sparse) equivalent to ``optimizer`` for
    ``param`` (looked up in its param groups). InvalidArgumentError when no server rule
    matches (route the parameter to 'allreduce' instead)."""
    group = next((g for g in optimizer.param_groups if any(p is param for p in g["params"])), None)
    if group is None:
        raise InvalidArgumentError(f"parameter '{name}' is not in the wrapped optimizer's param groups")
    kind = type(optimizer).__name__

    def refuse(why):
        raise InvalidArgumentError(f"parameter '{name}' is routed to the servers, whose {kind} rule has {why}; "
                                   f"route it with routes={{'{name}': 'allreduce'}} or change the optimizer")

    if group.get("maximize", False):
        refuse("no maximize")
    if group.get("weight_decay", 0) != 0:
        refuse("no weight decay")
    lr = float(group["lr"])
    if isinstance(optimizer, torch.optim.SGD):
        if group.get("dampening", 0) != 0:
            refuse("no dampening")
        m = float(group.get("momentum", 0.0))
        if m == 0:
            return "sgd", dict(lr=lr)
        return ("nesterov" if group.get("nesterov") else "momentum"), dict(lr=lr, momentum=m)
    if isinstance(optimizer, torch.optim.Adagrad):
        if group.get("lr_decay", 0) != 0 or group.get("initial_accumulator_value", 0) != 0:
            refuse("no lr_decay and no initial_accumulator_value")
        return "adagrad", dict(lr=lr, epsilon=float(group["eps"]))
    if isinstance(optimizer, (torch.optim.Adam, torch.optim.SparseAdam)):
        if group.get("amsgrad", False):
            refuse("no amsgrad")
        b1, b2 = group["betas"]
        return "adam", dict(lr=lr, beta1=float(b1), beta2=float(b2), epsilon=float(group["eps"]))
    raise InvalidArgumentError(f"parameter '{name}' is routed to the servers, which have no rule for "
                               f"{kind} (they have SGD with or without momentum, Adagrad, Adam/SparseAdam); "
                               f"route it with routes={{'{name}': 'allreduce'}}")


class _SparseParam:
    """A parameter held by the servers as P partitioned sparse tables."""

    def __init__(self, hybrid, index, name, param, rule, hyper, tracked):
        self.hybrid = hybrid
        self.tracked = tracked
        self.index = index
        self.name = name
        self.param = param
        self.rows, self.dim = int(param.shape[0]), int(param.shape[1])
        self.rule, self.hyper = rule, hyper
        self.tables = []
        self.partitions = 0
        self.generation = 0
        self.ready = False
        self.rows_pulled = 0
        self.rows_pushed = 0
        # state_dict hooks on the modules that looked the parameter up: a state_dict()
        # taken while the servers hold the rows pulls them in first (never stale).
        self._state_hooks = {}  # id(module) -> hook handle

    def _fresh_state(self, module, state_dict, prefix, local_metadata):
        """A module's state_dict hook: the local weight gets every server-held row (the
        state_dict's tensor shares its storage) before the caller sees it."""
        if self.ready:
            self.pull_all()

    def pull_all(self):
        """Copies every server-held row into the local weight."""
        with torch.no_grad():
            for start in range(0, self.rows, _CHUNK_ROWS):
                keys = torch.arange(start, min(self.rows, start + _CHUNK_ROWS), dtype=torch.int64,
                                    device=self.param.device)
                self.param.data[start:start + keys.numel()] = self.pull(keys)

    def drop_state_hooks(self):
        for handle in self._state_hooks.values():
            handle.remove()
        self._state_hooks = {}

    # The forward pre-hook: pull the batch's rows into the local weight.
    def before_lookup(self, module, inputs):
        if not self.ready:
            return  # the first forward, before the tables exist: the local values are the start
        if id(module) not in self._state_hooks:
            self._state_hooks[id(module)] = module._register_state_dict_hook(self._fresh_state)
        if getattr(module, "max_norm", None) is not None:
            raise InvalidArgumentError(f"parameter '{self.name}': an embedding with max_norm changes its "
                                       f"weight in forward, which the server-held rows cannot follow")
        ids = inputs[0] if inputs else None
        keys = None  # None: bad input, which torch's forward reports
        if isinstance(ids, torch.Tensor) and not ids.is_floating_point() and ids.numel() > 0:
            ids = ids.reshape(-1).to(torch.int64)
            if int(ids.min()) >= 0 and int(ids.max()) < self.rows:  # else torch raises IndexError
                keys = torch.unique(ids)
        h = self.hybrid
        if h.host_pulls and len(h.host_ranks) > 1 and torch.is_grad_enabled() and module.training:
            # The host's workers meet here whatever their input: one with bad input asks
            # for no rows.
            got = h._host_pull(self, keys if keys is not None else
                               torch.zeros(0, dtype=torch.int64, device=self.param.device))
        elif keys is not None:
            got = self.pull(keys)
        if keys is None:
            return
        with torch.no_grad():
            self.param.data.index_copy_(0, keys, got)

    def pull(self, keys, tables=None):
        w, timeout = self.hybrid.worker, self.hybrid.timeout
        tables = self.tables if tables is None else tables
        out = torch.empty(keys.numel(), self.dim, dtype=torch.float32, device=keys.device)
        if len(tables) == 1:
            w.pull_sparse(tables[0], keys, out).wait(timeout)
        else:
            part = torch.remainder(keys, len(tables))
            pending = []
            for k, t in enumerate(tables):
                mask = part == k
                sel = keys[mask].contiguous()
                if sel.numel():
                    o = torch.empty(sel.numel(), self.dim, dtype=torch.float32, device=keys.device)
                    pending.append((mask, o, w.pull_sparse(t, sel, o)))
            for mask, o, h in pending:
                h.wait(timeout)
                out[mask] = o
        self.rows_pulled += keys.numel()
        return out

    def push(self, keys, rows):
        """Starts the pushes of (keys, rows); returns the handles."""
        w = self.hybrid.worker
        rows = rows.contiguous()
        self.rows_pushed += keys.numel()
        if keys.numel() == 0:
            return []
        if len(self.tables) == 1:
            return [w.push_sparse(self.tables[0], keys.contiguous(), rows)]
        part = torch.remainder(keys, len(self.tables))
        handles = []
        for k, t in enumerate(self.tables):
            mask = part == k
            if bool(mask.any()):
                handles.append(w.push_sparse(t, keys[mask].contiguous(), rows[mask].contiguous()))
        return handles

    def declare(self, partitions):
        """Declares the tables of ``partitions`` partitions, each pinned to one server
        (rank 0 installs the placement; collective)."""
        h = self.hybrid
        w = h.worker
        self.generation += 1
        names = [f"{h.name}/{self.name}/P{partitions}/{k}" for k in range(partitions)]
        if w.rank == 0:
            placement = dict(w.placement())
            for k, n in enumerate(names):
                placement[n] = [k % w.num_servers]
            w.install_placement(placement, h.timeout)
        w.barrier("workers", h.timeout)
        return [w.declare_sparse(n, self.dim, self.rule, layer=n, **self.hyper) for n in names]

    def assign_all(self, tables, source, share):
        """Writes every row (ids 0..rows-1 taken mod ``share[1]`` == ``share[0]``) from
        ``source(keys)`` into ``tables``. Returns when the servers hold them."""
        w, timeout = self.hybrid.worker, self.hybrid.timeout
        mine, every = share
        ids = torch.arange(mine, self.rows, every, dtype=torch.int64)
        P = len(tables)
        for start in range(0, ids.numel(), _CHUNK_ROWS):
            keys = ids[start:start + _CHUNK_ROWS]
            rows = source(keys).contiguous()
            part = torch.remainder(keys, P)
            pending = []
            for k, t in enumerate(tables):
                mask = part == k
                if bool(mask.any()):
                    pending.append(w.assign_sparse(t, keys[mask].contiguous(), rows[mask].contiguous()))
            for hd in pending:
                hd.wait(timeout)


class Hybrid:
    """The synchronization of DistributedOptimizer in modes 'hybrid', 'ps' and
    'allreduce' (see layerps.torch.DistributedOptimizer)."""

    def __init__(self, optimizer, names, params, worker, mode, name, timeout, routes=None,
                 hosts=None, local_aggregation=True, partitions=None, host_pulls=False):
        if mode not in MODES:
            raise InvalidArgumentError(f"mode must be one of {MODES}, not {mode!r}")
        self.optimizer = optimizer
        self.names, self.params = list(names), list(params)
        self.worker = worker
        self.mode, self.name, self.timeout = mode, name, timeout
        routes = dict(routes or {})
        for n, r in routes.items():
            if n not in self.names:
                raise InvalidArgumentError(f"routes: no parameter named '{n}' (parameters: {', '.join(self.names)})")
            if r not in ROUTES:
                raise InvalidArgumentError(f"routes['{n}']: expected 'ps', 'allreduce' or 'allgather', not {r!r}")
        self._routes_given = routes
        if partitions is None:
            partitions = {}
        elif not isinstance(partitions, dict):
            partitions = {n: partitions for n in self.names}
        for n, p in partitions.items():
            if n not in self.names:
                raise InvalidArgumentError(f"partitions: no parameter named '{n}'")
            check_partitions(p, what=f"partitions['{n}']")
        self._partitions_given = partitions
        self._set_hosts(hosts, local_aggregation)
        self.host_pulls = bool(host_pulls) and self.hierarchical
        self.ready = False
        self._step = 0
        self._sparse = []       # _SparseParam, routed to the servers
        self._dense_ar = []     # indices of parameters all-reduced
        self._dense_ps = []     # indices of dense parameters through the 'sum' tables
        self._gathered = []     # indices of sparse parameters all-gathered
        self._kinds = {}
        self._routes = {}
        self._pending_reset = None
        self._ps_tables = None
        # Watch the 2-D parameters from now on: the first forward (before the first step,
        # which routes them) must be seen too.
        self._tracked = {i: _Tracked(p) for i, p in enumerate(self.params) if p.dim() == 2}
        for t in self._tracked.values():
            _manage(t)

    # --- hosts -------------------------------------------------------------------------
    def _set_hosts(self, hosts, local_aggregation):
        w = self.worker
        W = w.num_workers
        if hosts is None:
            by_rank = {n.rank: n.hostname for n in w.nodes() if str(n.role).lower().endswith("worker")}
            labels = [by_rank.get(r, f"?{r}") for r in range(W)]
        elif callable(hosts):
            labels = [hosts(r) for r in range(W)]
        else:
            labels = list(hosts)
            if len(labels) != W:
                raise InvalidArgumentError(f"hosts: expected one label per worker rank ({W}), got {len(labels)}")
        self.host_labels = labels
        groups = {}
        for r, h in enumerate(labels):
            groups.setdefault(h, []).append(r)
        self.host_ranks = groups[labels[w.rank]]            # this host's workers, ascending
        self.leader = self.host_ranks[0]
        self.leaders = sorted(g[0] for g in groups.values())  # one per host
        self.hierarchical = bool(local_aggregation) and len(self.leaders) < W

    # --- routing (at the first step) ---------------------------------------------------
    def _setup(self):
        w, timeout = self.worker, self.timeout
        n = len(self.params)
        codes = torch.zeros(2 * n, dtype=torch.float32)
        for i, p in enumerate(self.params):
            if p.grad is not None:
                codes[2 * i + (1 if p.grad.is_sparse else 0)] = 1
        if w.num_workers > 1:
            w.allreduce(codes, timeout)
        for i, (name, p) in enumerate(zip(self.names, self.params)):
            dense, sparse = codes[2 * i] > 0, codes[2 * i + 1] > 0
            if dense and sparse:
                raise InvalidArgumentError(f"parameter '{name}': its gradient is sparse on some workers and "
                                           f"dense on others at the first step")
            kind = "sparse" if sparse else "dense"
            default = ("ps" if kind == "sparse" else "allreduce") if self.mode == "hybrid" else self.mode
            route = self._routes_given.get(name, default)
            if kind == "sparse" and route == "ps" and p.dim() != 2:
                raise InvalidArgumentError(f"parameter '{name}': a sparse gradient routed to the servers needs a "
                                           f"2-D weight (rows x dim), got shape {tuple(p.shape)}")
            if route == "allgather" and kind != "sparse":
                raise InvalidArgumentError(f"parameter '{name}': route 'allgather' takes sparse gradients, and its "
                                           f"gradient is dense")
            self._kinds[name], self._routes[name] = kind, route
            if route == "allgather":
                self._gathered.append(i)
            elif kind == "sparse" and route == "ps":
                rule, hyper = server_rule(self.optimizer, p, name)
                self._sparse.append(_SparseParam(self, i, name, p, rule, hyper, self._tracked[i]))
            elif route == "ps":
                self._dense_ps.append(i)
            else:
                self._dense_ar.append(i)
        for sp in self._sparse:
            P = check_partitions(self._partitions_given.get(sp.name, w.num_servers), sp.rows,
                                 what=f"partitions of '{sp.name}'")
            sp.tables, sp.partitions = sp.declare(P), P
            # Every worker holds rank 0's values (broadcast at construction, not yet
            # stepped): each writes its share of the rows, so a large table's start goes
            # up through every worker's link at once (the barrier below waits for all).
            sp.assign_all(sp.tables, lambda k, p=sp.param: p.detach()[k], (w.rank, w.num_workers))
            sp.ready = True
            sp.tracked.sparse = sp
        for i, t in list(self._tracked.items()):  # only server-held rows need the hook
            if t.sparse is None:
                _unmanage(t)
                del self._tracked[i]
        self._ar_numel = sum(self.params[i].numel() for i in self._dense_ar)
        self._ps_numel = sum(self.params[i].numel() for i in self._dense_ps)
        device = _flat.device_of(self.params)  # a model on a GPU: its buffers there too
        self._ar_buf = torch.zeros(self._ar_numel, dtype=torch.float32, device=device)
        self._ps_buf = torch.zeros(self._ps_numel, dtype=torch.float32, device=device)
        if self._dense_ps:
            self._ps_tables = [w.declare_dense(f"{self.name}/dense_sum/{self._ps_numel}/{k}", self._ps_numel, "sum")
                               for k in range(3)]
            self._zeros = torch.zeros(self._ps_numel, dtype=torch.float32)
            if w.rank == 0:
                for h in [w.assign(t, self._zeros) for t in self._ps_tables]:
                    h.wait(timeout)
        w.barrier("workers", timeout)
        self.ready = True

    @property
    def routes(self):
        if not self.ready:
            raise FailedPreconditionError("the routes are decided at the first step (from the gradients' layouts)")
        return {n: self._routes[n] for n in self.names}

    @property
    def kinds(self):
        if not self.ready:
            raise FailedPreconditionError("the kinds are decided at the first step (from the gradients' layouts)")
        return {n: self._kinds[n] for n in self.names}

    @property
    def sparse_params(self):
        return list(self._sparse)

    # --- the step ----------------------------------------------------------------------
    def _check_gradients(self):
        """Before anything is sent: every gradient has the layout its parameter was routed
        with (a table marked sparse takes sparse gradients only, and the reverse)."""
        for name, p in zip(self.names, self.params):
            g = p.grad
            if g is None:
                continue
            kind = self._kinds[name]
            if g.is_sparse != (kind == "sparse"):
                got = "sparse" if g.is_sparse else "dense"
                raise InvalidArgumentError(f"parameter '{name}' was routed as {kind} at the first step but received "
                                           f"a {got} gradient")
        for sp in self._sparse:
            g = sp.param.grad
            if g is not None and g._nnz() and not sp.tracked.looked_up:
                raise InvalidArgumentError(f"parameter '{sp.name}' has a sparse gradient but was not looked up "
                                           f"through an nn.Embedding / nn.EmbeddingBag forward this step (its rows "
                                           f"could not be pulled); route it with routes={{'{sp.name}': 'allreduce'}}")

    def synchronize(self):
        w, timeout = self.worker, self.timeout
        if not self.ready:
            self._setup()
        self._check_gradients()
        W = w.num_workers
        pushes = []
        # 1. dense parameters through the 'sum' tables
        if self._dense_ps:
            self._flatten_grads(self._dense_ps, self._ps_buf)
            k = self._step % 3
            if self.hierarchical:
                self._host_sum(self._ps_buf)
            if not self.hierarchical or w.rank == self.leader:
                pushes.append(w.push(self._ps_tables[k], self._ps_buf))
        # 2. dense parameters through the all-reduce, and 3. sparse rows to the servers
        #    (through the host leader, and to the row's owner among the pushers when the
        #    rule is not linear). Sparse rows are pushed only once every worker has pulled
        #    this step's rows (its forward): the all-reduce orders that (it completes only
        #    once every worker entered it), else a barrier does. (Pushing during the
        #    all-reduce after a barrier was measured no faster: bench/HYBRID.md.)
        if self._dense_ar:
            self._dense_allreduce()
        elif self._sparse and W > 1:
            w.barrier("workers", timeout)
        self._follow_lr()
        pushes += self._push_sparse()
        # 4. all-gathered sparse gradients: every worker's rows to every other worker
        for i in self._gathered:
            self._allgather(i)
        for h in pushes:
            h.wait(timeout)
        if self._pending_reset is not None:
            self._pending_reset.wait(timeout)  # before the barrier (the aggregate mode's scheme)
            self._pending_reset = None
        if self._sparse or self._dense_ps:
            w.barrier("workers", timeout)  # every push of this step is applied
        if self._dense_ps:
            k = self._step % 3
            if not self.hierarchical or w.rank == self.leader:
                w.pull(self._ps_tables[k], self._ps_buf).wait(timeout)
            if self.hierarchical:
                self._host_share(self._ps_buf)
            if w.rank == 0:
                self._pending_reset = w.assign(self._ps_tables[(k + 2) % 3], self._zeros)
            self._ps_buf.mul_(1.0 / W)
            self._unflatten_grads(self._dense_ps, self._ps_buf)
        for sp in self._sparse:
            sp.param.grad = None  # stepped by the servers; the next forward pulls the rows
            sp.tracked.looked_up = False
        self._step += 1

    def _dense_allreduce(self):
        """The dense gradients routed to the all-reduce, averaged over the workers (through
        the host's leaders with local aggregation)."""
        w, W, timeout = self.worker, self.worker.num_workers, self.timeout
        self._flatten_grads(self._dense_ar, self._ar_buf)
        if self.hierarchical:
            self._host_sum(self._ar_buf)
            if len(self.leaders) > 1:  # else the host's sum is already everybody's
                if w.rank == self.leader:
                    w.allreduce(self._ar_buf, timeout, ranks=self.leaders)
                self._host_share(self._ar_buf)
        elif W > 1:
            w.allreduce(self._ar_buf, timeout)
        self._ar_buf.mul_(1.0 / W)
        self._unflatten_grads(self._dense_ar, self._ar_buf)

    def _follow_lr(self):
        """An LR scheduler changed a server-held parameter's group lr: the servers' rule
        takes it before this step's rows are pushed (Worker.set_learning_rate on each of
        its tables; every worker sets the same value)."""
        for sp in self._sparse:
            group = next(g for g in self.optimizer.param_groups if any(p is sp.param for p in g["params"]))
            lr = float(group["lr"])
            if lr != sp.hyper.get("lr"):
                for t in sp.tables:
                    self.worker.set_learning_rate(t, lr)
                sp.hyper["lr"] = lr

    def _push_sparse(self):
        """Starts this step's pushes of the server-held rows; returns their handles."""
        w, W = self.worker, self.worker.num_workers
        pushes = []
        for sp in self._sparse:
            g = sp.param.grad
            if g is None or g._nnz() == 0:
                ids = torch.zeros(0, dtype=torch.int64, device=sp.param.device)
                rows = torch.zeros(0, sp.dim, dtype=torch.float32, device=sp.param.device)
            else:
                g = g.coalesce()
                ids, rows = g.indices()[0].contiguous(), g.values().to(torch.float32)
            pushers = list(range(W))
            if self.hierarchical:
                pushers = self.leaders
                if len(self.host_ranks) > 1:  # the host's rows, summed, to its leader
                    ids, rows = _as_rows(_core.rows_to_root(w._node, *_rows_args(ids, rows), sp.dim, self.leader,
                                                            ranks=self.host_ranks, timeout=self.timeout),
                                         sp.param.device)
            if sp.rule != "sgd" and len(pushers) > 1 and w.rank in pushers:
                # each row to one pusher (its owner, by row id), summed there
                ids, rows = _as_rows(_core.rows_to_owners(w._node, *_rows_args(ids, rows), sp.dim,
                                                          ranks=pushers, timeout=self.timeout),
                                     sp.param.device)
            if w.rank in pushers:
                pushes += sp.push(ids, rows * (1.0 / W))
        return pushes

    def after_optimizer_step(self):
        """Sparse parameters stepped locally (routed to 'allreduce') get their gradient
        back to None, so that the next backward produces a sparse one again."""
        for name, p in zip(self.names, self.params):
            if self._kinds.get(name) == "sparse":
                p.grad = None

    def finish(self):
        """The end of training: the local weights get the server-held rows (so that a
        state_dict() taken after it is current too), then the hooks go."""
        if self._pending_reset is not None:
            self._pending_reset.wait(self.timeout)
            self._pending_reset = None
        for sp in self._sparse:
            sp.pull_all()
            sp.drop_state_hooks()
        for t in self._tracked.values():
            _unmanage(t)
        self._tracked = {}

    # --- host-local aggregation --------------------------------------------------------
    def _host_sum(self, buf):
        if len(self.host_ranks) > 1:
            self.worker.allreduce(buf, self.timeout, ranks=self.host_ranks)

    def _host_share(self, buf):
        """The leader's ``buf`` to the other workers of its host."""
        if len(self.host_ranks) > 1:
            broadcast(buf, self.leader, process_set=self.host_ranks, timeout=self.timeout, worker=self.worker)

    def _host_pull(self, sp, keys):
        """The rows of ``keys`` (unique ids) of server-held parameter ``sp``, pulled once
        per host: the leader pulls the union of its host's ids and sends each worker its
        rows (host_pulls)."""
        w = self.worker

        def pull(union):  # the leader's pull of the union, into host memory for the exchange
            return sp.pull(torch.from_numpy(union)).numpy()

        return to_device(_core.pull_rows_through_root(
            w._node, host_view(keys), sp.dim, self.leader, pull if w.rank == self.leader else None,
            ranks=self.host_ranks, timeout=self.timeout), keys.device)

    def _allgather(self, i):
        """Every worker's rows of parameter i, summed: the parameter's gradient becomes
        their average (a sparse tensor)."""
        w, W = self.worker, self.worker.num_workers
        p = self.params[i]
        g = p.grad
        dim = p.shape[1] if p.dim() == 2 else 1
        if g is None or g._nnz() == 0:
            ids = torch.zeros(0, dtype=torch.int64, device=p.device)
            rows = torch.zeros(0, dim, dtype=torch.float32, device=p.device)
        else:
            g = g.coalesce()
            ids, rows = g.indices()[0], g.values().reshape(-1, dim)
        ids, rows = _as_rows(_core.allgather_rows(w._node, *_rows_args(ids, rows), dim, timeout=self.timeout),
                             p.device)
        p.grad = torch.sparse_coo_tensor(ids.unsqueeze(0), (rows * (1.0 / W)).reshape(-1, *p.shape[1:]),
                                         p.shape).coalesce()

    # --- partitions --------------------------------------------------------------------
    def repartition(self, partitions, names=None):
        """Moves sparse parameters (all, or those named) to ``partitions`` partitions: new
        tables (a new placement and cluster-map epoch), every row copied from the old ones
        (each worker copies the rows r with r mod W == rank), then the old tables dropped
        (the servers free them). Collective, between steps. Pushes to the old tables that
        any worker started before calling it, waited for or not, are in the copy: each
        worker first flushes its requests in flight, then a barrier. The rules'
        server-side state (momentum, moments) is not copied: it restarts."""
        w, timeout = self.worker, self.timeout
        if not self.ready:
            raise FailedPreconditionError("repartition: the sparse tables exist from the first step on")
        chosen = [sp for sp in self._sparse if names is None or sp.name in names]
        if names is not None:
            unknown = set(names) - {sp.name for sp in self._sparse}
            if unknown:
                raise InvalidArgumentError(f"repartition: not a server-held sparse parameter: {sorted(unknown)}")
        for sp in chosen:
            check_partitions(partitions, sp.rows, what=f"partitions of '{sp.name}'")
        # Every worker's requests are complete (flush: also those whose handles nobody
        # waited for), so every push to the old tables is applied before a row is copied.
        w.flush(timeout)
        w.barrier("workers", timeout)
        for sp in chosen:
            if partitions == sp.partitions:
                continue
            new = sp.declare(partitions)
            old = sp.tables
            sp.assign_all(new, lambda k, sp=sp, old=old: sp.pull(k, old), (w.rank, w.num_workers))
            w.barrier("workers", timeout)
            sp.tables, sp.partitions = new, partitions
            if w.rank == 0:  # nobody uses the old tables after the barrier: free them
                for t in old:
                    w.drop_table(t)
            w.barrier("workers", timeout)

    @property
    def partitions(self):
        return {sp.name: sp.partitions for sp in self._sparse}

    def pull_sparse_params(self):
        """Copies every server-held row into the local weights (for evaluating without a
        forward; state_dict() and finish() do it on their own)."""
        for sp in self._sparse:
            sp.pull_all()

    # --- flat buffers (layerps/_flat.py) ----------------------------------------------------
    def _flatten_grads(self, indices, buf):
        _flat.flatten_grads([self.params[i] for i in indices], buf)

    def _unflatten_grads(self, indices, buf):
        _flat.unflatten_grads([self.params[i] for i in indices], buf)
