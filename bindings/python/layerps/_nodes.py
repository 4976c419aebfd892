"""The node objects over layerps._core (re-exported by layerps.cluster, which is their
public name): Options, Scheduler, Server, Worker, Table and Handle.

Every method that can block (start, join, barrier, declare, wait) releases the GIL while
it blocks, so other Python threads (for instance the other nodes of an in-process
cluster) keep running.
"""

import concurrent.futures
import os
import threading

import numpy as np

from . import _core
from ._arrays import as_input, as_keys, as_output, device_args, is_cuda, is_tensor, output
from ._rules import set_rule
from .errors import InvalidArgumentError

Options = _core.Options

# The option fields are those the binding exposes (one source of truth: the C++ struct as
# bound in src/bind_options.cc), in declaration order.
OPTION_FIELDS = tuple(name for name, value in vars(_core.Options).items()
                      if isinstance(value, property))

# How the servers synchronize a table's workers (docs/algorithms.md).
_SYNCS = {"async": _core.SyncMode.ASYNC, "bsp": _core.SyncMode.BSP, "ssp": _core.SyncMode.SSP}
# How a table's values travel (the servers keep and accumulate float32; docs/python.md).
_WIRE_DTYPES = {"fp32": _core.WireDType.FP32, "float32": _core.WireDType.FP32,
                "fp16": _core.WireDType.FP16, "float16": _core.WireDType.FP16,
                "bf16": _core.WireDType.BF16, "bfloat16": _core.WireDType.BF16}
_INITS = {"zeros": _core.Initializer.ZEROS, "uniform": _core.Initializer.UNIFORM,
          "normal": _core.Initializer.NORMAL}
# Which row a full bounded sparse table evicts (docs/sparse.md).
_EVICTIONS = {"none": _core.Eviction.NONE, "lru": _core.Eviction.LRU, "lfu": _core.Eviction.LFU,
              "decayed": _core.Eviction.DECAYED}
_GROUPS = {"workers": _core.Group.WORKERS, "servers": _core.Group.SERVERS, "all": _core.Group.ALL}


def make_options(options=None, *, from_env=False, **fields):
    """A validated ``Options``: a copy of ``options`` (or of the LAYERPS_* environment when
    ``from_env``, or the defaults) with ``fields`` set over it (``None`` values are skipped)."""
    if options is not None and from_env:
        raise InvalidArgumentError("give either options or from_env=True, not both")
    base = Options.from_env() if from_env else options
    o = Options()
    if base is not None:
        if not isinstance(base, Options):
            raise InvalidArgumentError(f"options: expected layerps.Options, got {type(base).__name__}")
        for f in OPTION_FIELDS:
            setattr(o, f, getattr(base, f))
    for k, v in fields.items():
        if v is None:
            continue
        if k not in OPTION_FIELDS:
            raise InvalidArgumentError(f"unknown option '{k}' (known: {', '.join(OPTION_FIELDS)})")
        try:
            setattr(o, k, v)
        except TypeError as e:
            raise InvalidArgumentError(f"option {k}={v!r}: {e}") from None
    o.validate()
    return o



def _in_thread(fn, name):
    """Runs fn() in a daemon thread; returns a Future with its result or exception."""
    fut = concurrent.futures.Future()

    def run():
        try:
            fut.set_result(fn())
        except BaseException as e:  # handed to the caller through the future
            fut.set_exception(e)

    threading.Thread(target=run, name=name, daemon=True).start()
    return fut


class Handle:
    """An asynchronous request in flight. ``wait(timeout)`` returns its result (the pulled
    values, or None) or raises the LayerPSError it failed with; on TimeoutError the
    request is still in flight and ``wait`` may be called again. The handle keeps the
    arrays of the request alive until it has completed."""

    __slots__ = ("_h", "_result", "_convert", "_commit")

    def __init__(self, h, result=None, convert=None, commit=None):
        self._h = h
        self._result = result    # returned instead of the C++ result (the caller's tensor)
        self._convert = convert  # applied to the C++ result
        self._commit = commit    # run once when the request succeeded: a staged CUDA
                                 # output's copy up (_arrays.staged_output)

    def wait(self, timeout=None):
        r = self._h.wait(timeout)
        if self._commit is not None:
            commit, self._commit = self._commit, None
            commit()
        if self._result is not None:
            return self._result
        return r if self._convert is None else self._convert(r)

    def done(self):
        """True once the request completed (``wait`` then returns at once)."""
        return self._h.done()

    def __repr__(self):
        return f"<layerps.Handle {self._h.what} ticket={self._h.ticket}>"


class Table:
    """A declared table. Its push/pull methods are the worker's, with this table."""

    def __init__(self, worker, table_id, spec):
        self.worker = worker
        self.id = table_id
        self.spec = spec
        self.name = spec.name
        self.kind = "dense" if spec.kind == _core.TableKind.DENSE else "sparse"
        self.size = int(spec.size)
        self.dim = int(spec.dim)

    def __repr__(self):
        shape = f"size={self.size}" if self.kind == "dense" else f"dim={self.dim}"
        rule = "sum" if self.spec.rule == _core.UpdateRule.SUM else f"sgd(lr={self.spec.learning_rate:g})"
        return f"<layerps.Table '{self.name}' id={self.id} {self.kind} {shape} {rule}>"

    def push(self, grad):
        return self.worker.push(self, grad)

    def pull(self, out=None):
        return self.worker.pull(self, out)

    def pushpull(self, grad, out=None):
        return self.worker.pushpull(self, grad, out)

    def assign(self, values):
        return self.worker.assign(self, values)

    def push_sparse(self, keys, rows):
        return self.worker.push_sparse(self, keys, rows)

    def pull_sparse(self, keys, out=None):
        return self.worker.pull_sparse(self, keys, out)

    def assign_sparse(self, keys, rows):
        return self.worker.assign_sparse(self, keys, rows)


class _Node:
    _core_class = None
    _role = "node"

    def __init__(self, options):
        self.options = options
        self._node = self._core_class(options)
        self._started = False

    def start(self):
        """Starts the node; blocks (GIL released) until it is part of the cluster."""
        self._node.start()
        self._started = True
        return self

    def start_async(self):
        """Starts the node in a background thread; returns a concurrent.futures.Future."""
        return _in_thread(self.start, f"layerps-{self._role}-start")

    def stop(self):
        """Stops the node. Idempotent."""
        self._node.stop()

    close = stop

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


class Scheduler(_Node):
    """The cluster's scheduler, in this process. ``address`` is where nodes reach it."""

    _core_class = _core.Scheduler
    _role = "scheduler"

    def __init__(self, address="tcp://127.0.0.1:0", num_servers=1, num_workers=1, *,
                 options=None, start=True, **fields):
        super().__init__(make_options(options, scheduler_address=address, num_servers=num_servers,
                                      num_workers=num_workers, **fields))
        if start:
            self.start()

    @property
    def address(self):
        return self._node.address

    def join(self, timeout=None):
        """Blocks until every worker left (returns), the cluster failed or the timeout (s)
        passed (raises)."""
        self._node.join(timeout)

    def nodes(self):
        return self._node.nodes()

    def stats(self):
        return self._node.stats()


class Server(_Node):
    """A server, in this process. ``start()`` blocks until the whole cluster registered:
    use ``start=False`` and ``start_async()`` to start several nodes from one thread."""

    _core_class = _core.Server
    _role = "server"

    def __init__(self, scheduler=None, *, options=None, start=True, from_env=False, **fields):
        super().__init__(make_options(options, from_env=from_env, scheduler_address=_address(scheduler),
                                      **fields))
        if start:
            self.start()

    def join(self, timeout=None):
        self._node.join(timeout)

    @property
    def rank(self):
        return self._node.rank

    @property
    def endpoint(self):
        return self._node.endpoint

    def stats(self):
        return self._node.stats()

    def table_stats(self):
        """Counters of this server's sparse tables, by name: rows_live, evicted, expired,
        admitted (rows created) and refused (pushed rows dropped by admission); see
        docs/sparse.md."""
        return self._node.table_stats()


def _address(scheduler):
    if scheduler is None or isinstance(scheduler, str):
        return scheduler
    if isinstance(scheduler, Scheduler):
        return scheduler.address
    raise InvalidArgumentError(f"scheduler: expected an address or a Scheduler, got {type(scheduler).__name__}")


class Worker(_Node):
    """A worker: declares tables, pushes and pulls. ``Worker.from_env()`` joins the
    cluster that layerps-launch (or ``python -m layerps.launch``) started."""

    _core_class = _core.Worker
    _role = "worker"

    def __init__(self, scheduler=None, *, options=None, start=True, from_env=False, **fields):
        if scheduler is None:  # also accepted as the option's own name
            scheduler = fields.pop("scheduler_address", None)
        super().__init__(make_options(options, from_env=from_env, scheduler_address=_address(scheduler),
                                      **fields))
        self._tables = {}
        self._lock = threading.Lock()
        if start:
            self.start()

    @classmethod
    def from_env(cls, start=True, **fields):
        """A worker configured by the LAYERPS_* variables (``fields`` override them)."""
        return cls(from_env=True, start=start, **fields)

    @staticmethod
    def device_support():
        """True when this build has the CUDA path and a GPU is usable by this process (the
        device route of push/pull/push_sparse/pull_sparse for CUDA tensors)."""
        return _core.Worker.device_support()

    # --- membership ----------------------------------------------------------------------
    @property
    def rank(self):
        return self._node.rank

    @property
    def id(self):
        return self._node.id

    @property
    def num_workers(self):
        return self._node.num_workers

    @property
    def num_servers(self):
        return self._node.num_servers

    def nodes(self):
        return self._node.nodes()

    def stats(self):
        return self._node.stats()

    def traffic(self):
        """Bytes and messages exchanged since start: {'peers': {node_id: {...}}, 'tables':
        {table_id: {'bytes_sent', 'bytes_received'}}} (headers counted per peer, payload
        per table)."""
        return self._node.traffic()

    # --- worker to worker ------------------------------------------------------------------
    def send_to(self, rank, tag, values):
        """Sends a float32 tensor to the worker of ``rank`` under an integer ``tag``
        (zero-copy; keep ``values`` unchanged until the Handle completes)."""
        return Handle(self._node.send_to(int(rank), int(tag), as_input(values, "send_to values")))

    def recv_from(self, rank, tag, out):
        """Receives the tensor the worker of ``rank`` sends under ``tag`` into ``out``
        (float32, exactly as many elements as were sent). ``wait()`` returns ``out``."""
        o, commit = output(out, "recv_from output")
        return Handle(self._node.recv_from(int(rank), int(tag), o), out if is_tensor(out) else None,
                      commit=commit)

    def allreduce(self, values, timeout=None, ranks=None, segment_bytes=None, algorithm="auto"):
        """All-reduce (sum), in place: on return ``values`` (a float32 numpy array or
        CPU torch tensor, C-contiguous; used without a copy) holds the element-wise sum over
        the participating workers. A collective: every participant calls it with the same
        size, ``ranks`` (the worker ranks taking part, this one among them; None: every
        worker), ``segment_bytes`` (pipelining unit, default 1 MiB) and ``algorithm``
        ('ring': 2(W-1) hops around the ring; 'direct': two steps, each worker exchanging a
        chunk with every other; 'auto', the default: direct up to 256 KiB, else the ring),
        and calls the collectives of one group in the same order. Blocks (the GIL released) until done,
        ``timeout`` seconds pass (TimeoutError; None: request_timeout_ms bounds it) or a
        participant dies (UnavailableError). Returns ``values``."""
        v, commit = output(values, "allreduce values", download=True)
        self._node.allreduce(v, timeout, None if ranks is None else [int(r) for r in ranks],
                             None if segment_bytes is None else int(segment_bytes), str(algorithm))
        return values if commit is None else commit()

    # --- placement ---------------------------------------------------------------------------
    def install_placement(self, layers, timeout=None):
        """Pins the tables of each layer to server ranks for the whole cluster:
        ``layers`` maps a layer name (TableSpec.layer) to a list of server ranks. Install
        it before declaring the layers' tables: declared tables never move."""
        if isinstance(layers, dict):
            layers = list(layers.items())
        self._node.install_placement([(str(k), [int(r) for r in v]) for k, v in layers], timeout)

    def placement(self):
        """The placement in force: {layer: [server ranks]}."""
        return self._node.placement()

    def table_servers(self, table):
        """The server ranks a table's key ranges live on, in key order."""
        return self._node.table_servers(self._id(table))

    def flush(self, timeout=None):
        """Waits until every push, pull and assign this worker started before the call
        has completed, whether its handle was waited for or not (handles stay valid;
        each one's error is raised by its own wait). A worker that pushes without
        waiting flushes before a point where its updates must be on the servers: flush,
        then barrier, and every worker's pushes are applied. Peer sends and receives are
        not waited for. Raises TimeoutError, saying how many are still in flight, when
        ``timeout`` (seconds) passes first."""
        self._node.flush(timeout)

    def barrier(self, group="workers", timeout=None):
        """Blocks until every node of the group ('workers', 'servers', 'all') is here, and
        returns how many took part (workers that joined are not waited for nor counted).
        Raises TimeoutError naming the ranks not arrived when ``timeout`` (seconds)
        passes, and UnavailableError naming the rank when a member died or a worker left
        (stop) without join(): such a barrier can never complete, also with timeout=None.
        Waiting past the scheduler's stall_warning_ms logs the ranks it waits for."""
        if group not in _GROUPS:
            raise InvalidArgumentError(f"barrier group must be one of {sorted(_GROUPS)}, not {group!r}")
        return self._node.barrier(_GROUPS[group], timeout)

    def join(self, timeout=None):
        """Uneven inputs, as Horovod's ``hvd.join()``: this worker ran out of data. The
        other workers' barriers and synchronous (bsp/ssp) steps go on without it from
        now on. Blocks until every live worker has joined (TimeoutError naming those that
        have not when ``timeout`` passes) and returns how many joined. Call stop() after."""
        return self._node.join(timeout)

    # --- tables --------------------------------------------------------------------------
    def declare_dense(self, name, size, rule="sum", *, lr=0.01, init="zeros", init_a=0.0,
                      init_b=0.0, seed=0, layer="", sync="async", staleness=0, wire_dtype="fp32",
                      **hyper):
        """Declares (or finds, when another worker declared the same spec) a dense table
        of ``size`` float32 elements. ``rule``: 'sum' (x += g), 'sgd' (x -= lr * g), ...
        (docs/algorithms.md). ``sync``: 'async' (every push applied on arrival), 'bsp'
        (each step's pushes summed and applied once; a pull waits for its step) or 'ssp'
        (a pull waits while its worker is more than ``staleness`` pushes ahead).
        ``wire_dtype``: 'fp32', 'fp16' or 'bf16': how pushed and pulled values travel (the
        servers keep float32 and apply the rule in float32; values round to the wire type)."""
        return self._declare(name, _core.TableKind.DENSE, int(size), 0, rule, lr, init, init_a,
                             init_b, seed, layer, sync, staleness, hyper, wire_dtype)

    def declare_sparse(self, name, dim, rule="sum", *, lr=0.01, init="zeros", init_a=0.0,
                       init_b=0.0, seed=0, layer="", sync="async", staleness=0, wire_dtype="fp32",
                       capacity=0, eviction=None, expiry_steps=0, admit_after=0, admit_probability=1.0,
                       cold_tier=False, cache_rows=0, cache_staleness=0, expiry_seconds=0, capacity_bytes=0,
                       score_decay=0.99, **hyper):
        """Declares a sparse table whose rows (any uint64 id) have ``dim`` float32 values,
        created on first touch by ``init`` ('zeros', 'uniform' in [init_a, init_b),
        'normal' with mean init_a and std init_b), seeded by (seed, name, key). ``sync``,
        ``staleness`` and ``wire_dtype`` as for declare_dense.

        Bounded tables (docs/sparse.md): ``capacity`` rows at most per server (0: no
        limit), or ``capacity_bytes`` (converted to rows by each server: the row's values,
        rule state, metadata and index share; ``table_stats()[name]['capacity']``),
        evicting by ``eviction`` ('lru', 'lfu', or 'decayed': the lowest push count decayed
        by ``score_decay`` per push the server applies to the table; default 'lru' when a
        capacity is given); ``expiry_steps``: a row in none of a server's last N pushes to the
        table is dropped; ``expiry_seconds``: a row no push updated for that long is
        dropped (at the server's next push to the table); ``admit_after``: an id gets a row
        at its k-th push;
        ``admit_probability``: only ids whose seeded hash falls below p get rows;
        ``cold_tier``: evicted rows go to a RocksDB store under the servers' ``cold_dir``
        and come back on the next touch (needs a capacity).

        Worker cache (docs/sparse.md "Worker cache"; async tables): each worker keeps up
        to ``cache_rows`` pulled rows (LRU) and answers a pull of a cached id from it while
        the row was fetched fewer than ``cache_staleness`` of its own pushes to the table
        ago; both 0 (default) for none. ``stats()['cache_hits']``/``['cache_misses']``
        count the ids."""
        if eviction is None:
            eviction = "lru" if capacity or capacity_bytes else "none"
        if eviction not in _EVICTIONS:
            raise InvalidArgumentError(
                f"eviction must be one of {sorted(_EVICTIONS)}, not {eviction!r}")
        bounds = {"capacity": int(capacity), "capacity_bytes": int(capacity_bytes),
                  "eviction": _EVICTIONS[eviction], "score_decay": float(score_decay),
                  "expiry_steps": int(expiry_steps), "expiry_seconds": int(expiry_seconds),
                  "admit_after": int(admit_after),
                  "admit_probability": float(admit_probability), "cold_tier": bool(cold_tier),
                  "cache_rows": int(cache_rows), "cache_staleness": int(cache_staleness)}
        for k in ("capacity", "capacity_bytes", "expiry_steps", "expiry_seconds", "admit_after", "cache_rows",
                  "cache_staleness"):
            if bounds[k] < 0:
                raise InvalidArgumentError(f"table '{name}': {k} must be >= 0, not {bounds[k]}")
        return self._declare(name, _core.TableKind.SPARSE, 0, int(dim), rule, lr, init, init_a,
                             init_b, seed, layer, sync, staleness, hyper, wire_dtype, bounds)

    def _declare(self, name, kind, size, dim, rule, lr, init, init_a, init_b, seed, layer, sync,
                 staleness, hyper, wire_dtype="fp32", bounds=None):
        if sync not in _SYNCS:
            raise InvalidArgumentError(f"sync must be one of {sorted(_SYNCS)}, not {sync!r}")
        if init not in _INITS:
            raise InvalidArgumentError(f"init must be one of {sorted(_INITS)}, not {init!r}")
        if wire_dtype not in _WIRE_DTYPES:
            raise InvalidArgumentError(
                f"wire_dtype must be one of {sorted(_WIRE_DTYPES)}, not {wire_dtype!r}")
        if size < 0 or dim < 0:
            raise InvalidArgumentError(f"table '{name}': size and dim must be >= 0")
        spec = _core.TableSpec()
        spec.name = name
        spec.kind = kind
        spec.size = size
        spec.dim = dim
        set_rule(spec, rule, hyper)  # the rule's name and hyper-parameters checked
        spec.learning_rate = float(lr)
        spec.init = _INITS[init]
        spec.init_a = float(init_a)
        spec.init_b = float(init_b)
        spec.seed = int(seed)
        spec.layer = layer
        spec.sync = _SYNCS[sync]
        spec.staleness = int(staleness)
        spec.wire_dtype = _WIRE_DTYPES[wire_dtype]
        for k, v in (bounds or {}).items():
            setattr(spec, k, v)
        spec.validate()
        table_id = self._node.declare_table(spec)
        t = Table(self, table_id, self._node.table_spec(table_id))
        with self._lock:
            self._tables[name] = t
        return t

    def set_learning_rate(self, table, lr):
        """Sets the learning rate the servers' rule uses for ``table`` from now on (every
        server and worker has it when this returns; the rule's state is kept). For a
        schedule stepped once per training step or less: each call is one map update.
        InvalidArgumentError for rules 'sum'/'elastic' or a rate that is not finite and
        >= 0 (> 0 for 'ftrl')."""
        self._node.set_learning_rate(self._id(table), float(lr))

    def checkpoint(self, dir=None, timeout=600.0):
        """Has every server write its shards of every table (values, the update rule's
        state, the specs) as one checkpoint set under ``dir``, a directory on the servers'
        hosts (None: the scheduler's ``checkpoint_dir``), and returns the set's directory
        (``<dir>/ckpt-<set>``) once every server's file is on disk. Servers started with
        ``restore=`` that directory (or ``dir``: its newest complete set) start from these
        values; see docs/checkpoints.md. Call it when no push is in flight (e.g. after a
        barrier) for one consistent cut. IoError when a server cannot write (the message
        names it), FailedPreconditionError while a checkpoint to another directory runs."""
        if dir is not None and not isinstance(dir, (str, os.PathLike)):
            raise InvalidArgumentError(f"dir: expected a path, got {type(dir).__name__}")
        return self._node.checkpoint("" if dir is None else os.fspath(dir), float(timeout))

    def drop_table(self, table):
        """Drops a table (a layerps.Table or its name) from the whole cluster: the servers
        free their shares and the name may be declared again (values from the initializer).
        Requests on the old table then raise NotFoundError; drop it when none is in flight.
        NotFoundError for a name no table has."""
        name = table.name if isinstance(table, Table) else table
        if not isinstance(name, str):
            raise InvalidArgumentError(f"table: expected a layerps.Table or a name, got {type(table).__name__}")
        self._node.drop_table(name)
        with self._lock:
            self._tables.pop(name, None)

    def table(self, name):
        """A table this worker declared, by name."""
        with self._lock:
            t = self._tables.get(name)
        if t is None:
            from .errors import NotFoundError
            raise NotFoundError(f"no table '{name}' declared by this worker")
        return t

    @staticmethod
    def _id(table):
        if isinstance(table, Table):
            return table.id
        if isinstance(table, (int, np.integer)) and not isinstance(table, bool):
            return int(table)
        raise InvalidArgumentError(f"table: expected a layerps.Table or a table id, got {type(table).__name__}")

    # --- dense ---------------------------------------------------------------------------
    def push(self, table, grad):
        """Pushes a dense gradient (numpy array or tensor, float32, as many elements as the
        table, any shape). A CUDA tensor is packed on its device and sent from pinned
        memory (docs/cuda.md), ordered after torch's current stream. Returns a Handle."""
        if is_cuda(grad):
            g, ptr, n, stream = device_args(grad, "push gradient")
            return Handle(self._node.push_device(self._id(table), ptr, n, stream, g))
        return Handle(self._node.push(self._id(table), as_input(grad, "push gradient")))

    def pull(self, table, out=None):
        """Pulls a dense table into ``out`` (float32, contiguous, written in place) or a new
        1-D numpy array. ``wait()`` returns ``out`` (the tensor, if a tensor was given). A
        CUDA ``out`` is filled by a copy enqueued on torch's current stream when the pull
        completes (work queued on that stream afterwards sees the values)."""
        if is_cuda(out):
            o, ptr, n, stream = device_args(out, "pull output", writable=True)
            return Handle(self._node.pull_device(self._id(table), ptr, n, stream, o), out)
        o = None if out is None else as_output(out, "pull output")
        return Handle(self._node.pull(self._id(table), o), out if is_tensor(out) else None)

    def pushpull(self, table, grad, out=None):
        """Pushes ``grad`` and pulls the values after it was applied, in one round trip."""
        g = as_input(grad, "pushpull gradient")
        o, commit = (None, None) if out is None else output(out, "pushpull output")
        return Handle(self._node.pushpull(self._id(table), g, o), out if is_tensor(out) else None,
                      commit=commit)

    def assign(self, table, values):
        """Overwrites a dense table's values (no update rule)."""
        return Handle(self._node.assign(self._id(table), as_input(values, "assign values")))

    # --- sparse --------------------------------------------------------------------------
    def _device_keys(self, keys, like):
        """Keys for a device call: an int64 tensor on `like`'s device (CPU keys go there)."""
        import torch
        if not is_tensor(keys):
            keys = torch.as_tensor(np.asarray(as_keys(keys)).view(np.int64))
        if keys.dtype != torch.int64:
            keys = keys.to(torch.int64)
        return keys.to(like.device)

    def push_sparse(self, table, keys, rows):
        """Pushes gradient rows (len(keys) x dim) for integer ``keys``; duplicates are summed.
        CUDA ``rows`` are coalesced and bucketed on their device (keys moved there if they
        are not), ordered after torch's current stream."""
        if is_cuda(rows):
            r, rptr, nr, stream = device_args(rows, "push_sparse rows")
            k, kptr, nk, _ = device_args(self._device_keys(keys, rows), "push_sparse keys", dtype="keys")
            return Handle(self._node.push_sparse_device(self._id(table), kptr, nk, rptr, nr, stream, (k, r)))
        return Handle(self._node.push_sparse(self._id(table), as_keys(keys),
                                             as_input(rows, "push_sparse rows")))

    def pull_sparse(self, table, keys, out=None):
        """Pulls the rows of ``keys`` into ``out`` (len(keys) x dim) or a new array (a
        tensor when ``keys`` is a tensor). CUDA keys (or a CUDA ``out``) take the device
        route: the rows are scattered on the device by work enqueued on torch's current
        stream; without ``out`` the result is a new tensor on the keys' device."""
        if is_cuda(out) or (out is None and is_cuda(keys)):
            import torch
            like = out if out is not None else keys
            k, kptr, nk, _ = device_args(self._device_keys(keys, like), "pull_sparse keys", dtype="keys")
            if out is None:
                dim = int(self._node.table_spec(self._id(table)).dim)
                out = torch.empty((nk, dim), dtype=torch.float32, device=keys.device)
            o, optr, no, stream = device_args(out, "pull_sparse output", writable=True)
            return Handle(self._node.pull_sparse_device(self._id(table), kptr, nk, optr, no, stream, (k, o)), out)
        k = as_keys(keys)
        if out is not None:
            h = self._node.pull_sparse(self._id(table), k, as_output(out, "pull_sparse output"))
            return Handle(h, out if is_tensor(out) else None)
        h = self._node.pull_sparse(self._id(table), k, None)
        if is_tensor(keys):
            import torch
            return Handle(h, convert=torch.from_numpy)
        return Handle(h)

    def push_sparse_many(self, entries):
        """Pushes gradient rows to several sparse tables in one request:
        ``entries`` is a list of ``(table, keys, rows)``; entries of one table are merged
        (duplicate keys summed across them). One message per server for all of them
        (docs/sparse.md, "Many tables in one request"); one handle."""
        for i, e in enumerate(entries):
            if len(e) != 3:
                raise InvalidArgumentError(f"push_sparse_many entry {i}: (table, keys, rows), got {len(e)} items")
        if entries and all(is_cuda(e[2]) for e in entries):
            # Every entry's rows in GPU memory: the core's device variant, on the current
            # stream of the first entry's device.
            args, keep, stream = [], [], None
            for i, e in enumerate(entries):
                r, rptr, nr, st = device_args(e[2], f"push_sparse_many entry {i} rows")
                k, kptr, nk, _ = device_args(self._device_keys(e[1], e[2]),
                                             f"push_sparse_many entry {i} keys", dtype="keys")
                stream = st if stream is None else stream
                args.append((self._id(e[0]), kptr, nk, rptr, nr))
                keep += [k, r]
            return Handle(self._node.push_sparse_many_device(args, stream, keep))
        args = []
        for i, e in enumerate(entries):
            args.append((self._id(e[0]), as_keys(e[1]), as_input(e[2], f"push_sparse_many entry {i} rows")))
        return Handle(self._node.push_sparse_many(args))

    def pull_sparse_many(self, entries):
        """Pulls the rows of several sparse tables in one request: ``entries`` is a list of
        ``(table, keys)`` or ``(table, keys, out)``; each key of a table is pulled once
        however many entries name it. ``wait()`` returns the list of outputs (``out`` where
        given; else new arrays, tensors for tensor keys)."""
        for i, e in enumerate(entries):
            if len(e) not in (2, 3):
                raise InvalidArgumentError(f"pull_sparse_many entry {i}: (table, keys) or (table, keys, out), "
                                           f"got {len(e)} items")
        if entries and all(is_cuda(e[2]) if len(e) == 3 and e[2] is not None else is_cuda(e[1])
                           for e in entries):
            return self._pull_sparse_many_device(entries)
        args, outs = [], []
        for i, e in enumerate(entries):
            out = e[2] if len(e) == 3 else None
            k = as_keys(e[1])
            if out is not None:
                args.append((self._id(e[0]), k, as_output(out, f"pull_sparse_many entry {i} output")))
            else:
                args.append((self._id(e[0]), k))
            outs.append((out, is_tensor(e[1])))
        h = self._node.pull_sparse_many(args)

        def convert(arrays):
            result = []
            for (out, tensor_keys), a in zip(outs, arrays):
                if out is not None:
                    result.append(out)
                elif tensor_keys:
                    import torch
                    result.append(torch.from_numpy(a))
                else:
                    result.append(a)
            return result

        return Handle(h, convert=convert)

    def _pull_sparse_many_device(self, entries):
        """pull_sparse_many with every output in GPU memory (given, or new on the keys'
        device): the core's device variant, on the current stream of the first output's
        device."""
        import torch
        args, keep, results, stream = [], [], [], None
        for i, e in enumerate(entries):
            out = e[2] if len(e) == 3 else None
            like = out if out is not None else e[1]
            k, kptr, nk, _ = device_args(self._device_keys(e[1], like), f"pull_sparse_many entry {i} keys",
                                         dtype="keys")
            if out is None:
                dim = int(self._node.table_spec(self._id(e[0])).dim)
                out = torch.empty((nk, dim), dtype=torch.float32, device=like.device)
            o, optr, no, st = device_args(out, f"pull_sparse_many entry {i} output", writable=True)
            stream = st if stream is None else stream
            args.append((self._id(e[0]), kptr, nk, optr, no))
            keep += [k, o]
            results.append(out)
        return Handle(self._node.pull_sparse_many_device(args, stream, keep), results)

    def assign_sparse(self, table, keys, rows):
        """Overwrites rows (for duplicate keys the last row wins)."""
        return Handle(self._node.assign_sparse(self._id(table), as_keys(keys),
                                               as_input(rows, "assign_sparse rows")))

    @property
    def parked_requests(self):
        """Requests whose Handle was dropped while in flight (their buffers are held)."""
        return self._node.parked_requests
