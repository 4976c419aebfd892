"""Embedding collections over keyed jagged features, as recommendation models write them
(TorchRec's vocabulary): a batch of many sparse features is one ``KeyedJaggedTensor``;
an ``EmbeddingBagCollection`` (pooled) or ``EmbeddingCollection`` (one row per id) built
from table configs looks all of them up with **one fused pull per server**, and backward
pushes every table's gradient rows with **one fused push per server**
(``Worker.pull_sparse_many``/``push_sparse_many``). The rows live on the servers, which
apply each table's rule (default ``rowwise_adagrad``) to them.

    tables = [lt.EmbeddingBagConfig("t_user", 16, num_embeddings=None, feature_names=["user"]),
              lt.EmbeddingBagConfig("t_item", 16, 100_000, ["item", "clicked_item"])]
    ebc = lt.EmbeddingBagCollection(tables)
    kjt = lt.KeyedJaggedTensor.from_lengths_sync(["user", "item", "clicked_item"], values, lengths)
    pooled = ebc(kjt)                      # a KeyedTensor: pooled.values() is (batch, 48)
    pooled["item"]                         # (batch, 16)

docs/python.md ("Recommendation models") and docs/sparse.md have the details.
"""

import dataclasses
import hashlib
import itertools
from typing import Dict, List, Optional, Sequence

import torch

from ..errors import FailedPreconditionError, InvalidArgumentError
from .._rules import RULES
from ._common import worker_or_default as _worker

__all__ = ["JaggedTensor", "KeyedJaggedTensor", "KeyedTensor", "EmbeddingBagConfig",
           "EmbeddingConfig", "EmbeddingBagCollection", "EmbeddingCollection"]


# --- Jagged inputs ------------------------------------------------------------------------
class JaggedTensor:
    """One feature of a batch: ``values`` (the ids of every sample, concatenated),
    ``lengths`` (ids per sample) and their ``offsets``, and optional per-id ``weights``."""

    def __init__(self, values, lengths, offsets, weights=None):
        self._values, self._lengths, self._offsets, self._weights = values, lengths, offsets, weights

    def values(self):
        return self._values

    def lengths(self):
        return self._lengths

    def offsets(self):
        return self._offsets

    def weights(self):
        if self._weights is None:
            raise InvalidArgumentError("this JaggedTensor has no weights")
        return self._weights

    def weights_or_none(self):
        return self._weights

    def to_dense(self):
        """The ids of each sample, as a list of tensors."""
        return [self._values[int(a):int(b)] for a, b in zip(self._offsets[:-1], self._offsets[1:])]

    def __repr__(self):
        return f"JaggedTensor(lengths={self._lengths.tolist()}, values={self._values.tolist()})"


def _as_1d(x, what, dtype=None):
    t = torch.as_tensor(x)
    if t.dim() != 1:
        raise InvalidArgumentError(f"KeyedJaggedTensor: {what} must be 1-D, got shape {tuple(t.shape)}")
    return t if dtype is None else t.to(dtype)


class KeyedJaggedTensor:
    """A batch of several sparse features, TorchRec's layout: ``keys`` (feature names),
    ``values`` (every id, feature-major: all of feature 0's samples, then feature 1's...),
    ``lengths`` (len(keys) × batch entries: ids per (feature, sample)) or ``offsets``
    (their prefix sums, one more entry), and optional ``weights`` (one per id: per-sample
    weights of weighted features). Checked when built: lengths non-negative and summing
    to the values, offsets starting at 0 and not decreasing, weights as long as values,
    the lengths a whole number of batches. Ids are int64."""

    def __init__(self, keys, values, weights=None, lengths=None, offsets=None, stride=None):
        keys = list(keys)
        if len(set(keys)) != len(keys):
            raise InvalidArgumentError(f"KeyedJaggedTensor: feature names repeat: {keys}")
        for k in keys:
            if not isinstance(k, str) or not k:
                raise InvalidArgumentError(f"KeyedJaggedTensor: feature names must be non-empty strings, got {k!r}")
        values = _as_1d(values, "values")
        if values.is_floating_point() or values.is_complex() or values.dtype == torch.bool:
            raise InvalidArgumentError(f"KeyedJaggedTensor: values (ids) must be integers, got {values.dtype}")
        values = values.to(torch.int64)
        if (lengths is None) == (offsets is None):
            raise InvalidArgumentError("KeyedJaggedTensor: give exactly one of lengths and offsets")
        if lengths is not None:
            lengths = _as_1d(lengths, "lengths", torch.int64)
            if lengths.numel() and int(lengths.min()) < 0:
                raise InvalidArgumentError(f"KeyedJaggedTensor: negative length at position "
                                           f"{int((lengths < 0).nonzero()[0])}")
            offsets = torch.zeros(lengths.numel() + 1, dtype=torch.int64, device=lengths.device)
            torch.cumsum(lengths, 0, out=offsets[1:])
        else:
            offsets = _as_1d(offsets, "offsets", torch.int64)
            if offsets.numel() == 0 or int(offsets[0]) != 0:
                raise InvalidArgumentError("KeyedJaggedTensor: offsets must start at 0")
            lengths = offsets[1:] - offsets[:-1]
            if lengths.numel() and int(lengths.min()) < 0:
                raise InvalidArgumentError("KeyedJaggedTensor: offsets must not decrease")
        if int(offsets[-1]) != values.numel():
            raise InvalidArgumentError(f"KeyedJaggedTensor: the lengths sum to {int(offsets[-1])} but there "
                                       f"are {values.numel()} values")
        if keys and lengths.numel() % len(keys):
            raise InvalidArgumentError(f"KeyedJaggedTensor: {lengths.numel()} lengths for {len(keys)} keys "
                                       "(must be keys × batch size)")
        batch = lengths.numel() // len(keys) if keys else 0
        if stride is not None and int(stride) != batch:
            raise InvalidArgumentError(f"KeyedJaggedTensor: stride {stride} but the lengths give a batch of {batch}")
        if weights is not None:
            weights = _as_1d(weights, "weights")
            if not weights.is_floating_point():
                raise InvalidArgumentError(f"KeyedJaggedTensor: weights must be floating point, got {weights.dtype}")
            if weights.numel() != values.numel():
                raise InvalidArgumentError(f"KeyedJaggedTensor: {weights.numel()} weights for {values.numel()} values")
        self._keys, self._values, self._weights = keys, values, weights
        self._lengths, self._offsets, self._stride = lengths, offsets, batch

    @staticmethod
    def from_lengths_sync(keys, values, lengths, weights=None, stride=None):
        return KeyedJaggedTensor(keys, values, weights=weights, lengths=lengths, stride=stride)

    @staticmethod
    def from_offsets_sync(keys, values, offsets, weights=None, stride=None):
        return KeyedJaggedTensor(keys, values, weights=weights, offsets=offsets, stride=stride)

    @staticmethod
    def from_dict(features: Dict[str, "JaggedTensor"]):
        """From {name: JaggedTensor} (every one of the same batch size)."""
        keys = list(features)
        values = [features[k].values() for k in keys]
        lengths = [features[k].lengths() for k in keys]
        ws = [features[k].weights_or_none() for k in keys]
        weights = None
        if any(w is not None for w in ws):
            weights = torch.cat([w if w is not None else torch.ones(v.numel(), device=v.device)
                                 for w, v in zip(ws, values)])
        return KeyedJaggedTensor(keys, torch.cat(values) if values else torch.zeros(0, dtype=torch.int64),
                                 weights=weights, lengths=torch.cat(lengths) if lengths else torch.zeros(0))

    def keys(self) -> List[str]:
        return list(self._keys)

    def values(self):
        return self._values

    def weights(self):
        if self._weights is None:
            raise InvalidArgumentError("this KeyedJaggedTensor has no weights")
        return self._weights

    def weights_or_none(self):
        return self._weights

    def lengths(self):
        return self._lengths

    def offsets(self):
        return self._offsets

    def stride(self) -> int:
        """The batch size."""
        return self._stride

    def length_per_key(self) -> List[int]:
        b = self._stride
        return [int(self._offsets[(i + 1) * b] - self._offsets[i * b]) for i in range(len(self._keys))]

    def offset_per_key(self) -> List[int]:
        return list(itertools.accumulate([0] + self.length_per_key()))

    def _slice(self, i):
        """Feature i: its values, lengths, offsets (from 0) and weights."""
        b = self._stride
        lo, hi = int(self._offsets[i * b]), int(self._offsets[(i + 1) * b])
        offsets = self._offsets[i * b:(i + 1) * b + 1] - lo
        w = None if self._weights is None else self._weights[lo:hi]
        return self._values[lo:hi], self._lengths[i * b:(i + 1) * b], offsets, w

    def __getitem__(self, key) -> JaggedTensor:
        try:
            i = self._keys.index(key)
        except ValueError:
            raise KeyError(key) from None
        return JaggedTensor(*self._slice(i))

    def to_dict(self) -> Dict[str, JaggedTensor]:
        return {k: JaggedTensor(*self._slice(i)) for i, k in enumerate(self._keys)}

    def __repr__(self):
        return f"KeyedJaggedTensor(keys={self._keys}, batch={self._stride}, values={self._values.numel()})"


def as_keyed_jagged(features) -> KeyedJaggedTensor:
    """A KeyedJaggedTensor from ours, from TorchRec's (anything with keys(), values(),
    lengths() and weights_or_none(): taken as it is, checked), or from a dict
    {name: (ids, lengths)}."""
    if isinstance(features, KeyedJaggedTensor):
        return features
    if isinstance(features, dict):
        return KeyedJaggedTensor.from_dict({k: v if isinstance(v, JaggedTensor) else
                                            JaggedTensor(torch.as_tensor(v[0]), torch.as_tensor(v[1]), None)
                                            for k, v in features.items()})
    if all(hasattr(features, a) for a in ("keys", "values", "lengths")):
        weights = features.weights_or_none() if hasattr(features, "weights_or_none") else None
        return KeyedJaggedTensor(features.keys(), features.values(), weights=weights, lengths=features.lengths())
    raise InvalidArgumentError(f"expected a KeyedJaggedTensor (LayerPS's or TorchRec's), got {type(features).__name__}")


class KeyedTensor:
    """The pooled embeddings of a batch, as TorchRec's: ``values()`` is (batch, sum of the
    features' dims), the features side by side in ``keys()`` order; ``[key]`` and
    ``to_dict()`` give each feature's (batch, dim) block."""

    def __init__(self, keys, length_per_key, values):
        self._keys = list(keys)
        self._lengths = list(length_per_key)
        self._values = values
        self._offsets = list(itertools.accumulate([0] + self._lengths))

    def keys(self):
        return list(self._keys)

    def values(self):
        return self._values

    def length_per_key(self):
        return list(self._lengths)

    def offset_per_key(self):
        return list(self._offsets)

    def __getitem__(self, key):
        i = self._keys.index(key)
        return self._values[:, self._offsets[i]:self._offsets[i + 1]]

    def to_dict(self):
        return {k: self[k] for k in self._keys}

    def __repr__(self):
        return f"KeyedTensor(keys={self._keys}, values={tuple(self._values.shape)})"


# --- Table configs -------------------------------------------------------------------------
_BOUNDS = ("capacity", "capacity_bytes", "eviction", "expiry_steps", "expiry_seconds", "admit_after",
           "admit_probability", "score_decay", "cold_tier", "cache_rows", "cache_staleness")


@dataclasses.dataclass
class EmbeddingBagConfig:
    """One table of a collection. ``num_embeddings``: ids must lie in [0, n) (None: hashed
    ids, any int64). ``feature_names``: the features looked up in it (several features may
    share a table; an id they share is pulled and pushed once per step). ``pooling``: 'sum'
    or 'mean' per sample (EmbeddingBagCollection; per-id weights from the input multiply
    the rows when the collection is weighted). ``rule`` and ``hyper`` (e.g. {'eps': 1e-8})
    the servers' update rule (any sparse rule, docs/sparse.md); ``init``/``init_a``/
    ``init_b``/``seed`` the rows' initializer; ``sync`` 'async' or 'bsp' (the servers sum a
    step's pushes of every worker and apply them once: exact with any rule); ``bounds``
    the table's bounds on each server (capacity, eviction, expiry, admission, cold tier,
    worker cache: the keyword arguments of ``Worker.declare_sparse``)."""

    name: str
    embedding_dim: int
    num_embeddings: Optional[int] = None
    feature_names: Sequence[str] = ()
    pooling: str = "sum"
    rule: str = "rowwise_adagrad"
    lr: float = 0.01
    hyper: Dict[str, float] = dataclasses.field(default_factory=dict)
    init: str = "uniform"
    init_a: float = -0.01
    init_b: float = 0.01
    seed: int = 0
    sync: str = "async"
    bounds: Dict[str, object] = dataclasses.field(default_factory=dict)

    def check(self, pooled):
        where = f"table '{self.name}'"
        if not isinstance(self.name, str) or not self.name:
            raise InvalidArgumentError("a table config needs a non-empty name")
        if int(self.embedding_dim) < 1:
            raise InvalidArgumentError(f"{where}: embedding_dim must be >= 1")
        if self.num_embeddings is not None and int(self.num_embeddings) < 1:
            raise InvalidArgumentError(f"{where}: num_embeddings must be >= 1 (or None for hashed ids)")
        if not self.feature_names:
            raise InvalidArgumentError(f"{where}: no feature_names (the features looked up in it)")
        if pooled and self.pooling not in ("sum", "mean"):
            raise InvalidArgumentError(f"{where}: pooling must be 'sum' or 'mean', not {self.pooling!r}")
        if self.rule not in RULES or self.rule in ("elastic",):
            raise InvalidArgumentError(f"{where}: rule {self.rule!r} is not a sparse rule "
                                       f"({', '.join(r for r in RULES if r != 'elastic')})")
        if self.sync not in ("async", "bsp"):
            raise InvalidArgumentError(f"{where}: sync must be 'async' or 'bsp', not {self.sync!r}")
        for k in self.bounds:
            if k not in _BOUNDS:
                raise InvalidArgumentError(f"{where}: unknown bound {k!r} (known: {', '.join(_BOUNDS)})")

    def fingerprint(self):
        """What every worker must agree on, as text."""
        d = dataclasses.asdict(self)
        d["feature_names"] = list(self.feature_names)
        return repr(sorted(d.items()))


@dataclasses.dataclass
class EmbeddingConfig(EmbeddingBagConfig):
    """A table of an EmbeddingCollection (no pooling: one row per id)."""


# --- The collections -----------------------------------------------------------------------
class _PullMany(torch.autograd.Function):
    """The rows of every table's unique ids, pulled in one fused request; backward pushes
    every table's gradient rows in one fused request."""

    @staticmethod
    def forward(ctx, trigger, module, keys):
        ctx.module, ctx.keys = module, keys
        return tuple(module._pull(keys))

    @staticmethod
    def backward(ctx, *grads):
        ctx.module._push(ctx.keys, grads)
        return (None, None, None)


_collection_counter = itertools.count()


class _Collection(torch.nn.Module):
    _POOLED = True

    def __init__(self, tables, *, worker=None, is_weighted=False, grad_scale=None, timeout=None,
                 check_agreement=True):
        super().__init__()
        tables = list(tables)
        if not tables:
            raise InvalidArgumentError(f"{type(self).__name__}: no tables")
        names, features = set(), {}
        for t in tables:
            t.check(self._POOLED)
            if t.name in names:
                raise InvalidArgumentError(f"{type(self).__name__}: table '{t.name}' given twice")
            names.add(t.name)
            for f in t.feature_names:
                if f in features:
                    raise InvalidArgumentError(f"feature '{f}' is in table '{features[f].name}' and in "
                                               f"table '{t.name}'")
                features[f] = t
        self.configs = tables
        self._feature_table = features
        self.is_weighted = bool(is_weighted)
        self.worker = w = _worker(worker)
        # Each worker's mean loss over its own batch: the servers sum the workers' pushes,
        # so 1/W makes them apply the gradient of the global batch's mean loss, as an
        # averaged all-reduce does for the dense part.
        self.grad_scale = 1.0 / max(1, w.num_workers) if grad_scale is None else float(grad_scale)
        self.timeout = timeout
        if check_agreement and w.num_workers > 1:
            self._check_agreement()
        self._tables = {}
        for t in tables:
            hyper = dict(t.hyper)
            lr = {} if t.rule == "sum" else {"lr": t.lr}
            self._tables[t.name] = w.declare_sparse(t.name, int(t.embedding_dim), t.rule, init=t.init,
                                                    init_a=t.init_a, init_b=t.init_b, seed=t.seed,
                                                    sync=t.sync, **lr, **hyper, **t.bounds)
        self._pending = []
        self.rows_pulled = 0
        self.rows_pushed = 0
        self.requests = 0  # fused pulls and pushes made

    def _check_agreement(self):
        """Every worker builds the same collection: a hash of the configs, all-gathered.
        A difference names the first differing worker."""
        from ..collectives import allgather
        text = "\n".join(t.fingerprint() for t in self.configs)
        mine = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little", signed=True)
        everyone = allgather(torch.tensor([mine], dtype=torch.int64), worker=self.worker,
                             name="layerps.collection.agree")
        for rank, h in enumerate(everyone.tolist()):
            if h != mine:
                raise InvalidArgumentError(
                    f"{type(self).__name__}: worker {rank}'s tables differ from worker "
                    f"{self.worker.rank}'s ({', '.join(t.name for t in self.configs)}): every worker must "
                    "build the collection from the same configs")

    def feature_names(self):
        return [f for t in self.configs for f in t.feature_names]

    def _check_features(self, kjt):
        for k in kjt.keys():
            if k not in self._feature_table:
                raise InvalidArgumentError(f"feature '{k}' is served by no table of this "
                                           f"{type(self).__name__} (tables: {', '.join(t.name for t in self.configs)})")
        if kjt.weights_or_none() is not None and not self.is_weighted and self._POOLED:
            raise InvalidArgumentError("the input has weights but the collection was built with is_weighted=False")
        if self.is_weighted and kjt.weights_or_none() is None:
            raise InvalidArgumentError("the collection is weighted (is_weighted=True) but the input has no weights")

    def _plan(self, kjt):
        """Per table: its features' ids concatenated, their unique ids and the inverse."""
        by_table = {}
        for i, k in enumerate(kjt.keys()):
            t = self._feature_table[k]
            ids, lengths, offsets, weights = kjt._slice(i)
            if t.num_embeddings is not None and ids.numel():
                lo, hi = int(ids.min()), int(ids.max())
                if lo < 0 or hi >= t.num_embeddings:
                    raise InvalidArgumentError(f"feature '{k}': ids must lie in [0, {t.num_embeddings}) for table "
                                               f"'{t.name}', got values in [{lo}, {hi}]")
            by_table.setdefault(t.name, []).append((k, ids, lengths, offsets, weights))
        # A bsp table is pulled and pushed every step, with or without ids in the batch: the
        # servers count every worker's push of each step before they apply it.
        for t in self.configs:
            if t.sync == "bsp" and t.name not in by_table:
                by_table[t.name] = []
        keys, inverses = [], {}
        device = kjt.values().device  # CUDA ids: every request takes the device route
        for name, feats in by_table.items():
            if not feats:
                keys.append((name, torch.zeros(0, dtype=torch.int64, device=device)))
                continue
            ids = torch.cat([f[1] for f in feats])
            unique, inverse = torch.unique(ids, return_inverse=True)
            keys.append((name, unique))
            start = 0
            for k, fids, lengths, offsets, weights in feats:
                inverses[k] = (len(keys) - 1, inverse[start:start + fids.numel()], offsets, weights)
                start += fids.numel()
        return keys, inverses

    def _pull(self, keys):
        outs = [torch.empty(u.numel(), int(self._config(name).embedding_dim), dtype=torch.float32,
                            device=u.device) for name, u in keys]
        entries = [(self._tables[name], u, out) for (name, u), out in zip(keys, outs)]
        self.worker.pull_sparse_many(entries).wait(self.timeout)
        self.requests += 1
        self.rows_pulled += sum(u.numel() for _, u in keys)
        return outs

    def _push(self, keys, grads):
        entries = []
        for (name, u), g in zip(keys, grads):
            bsp = self._config(name).sync == "bsp"
            if not bsp and (g is None or u.numel() == 0):
                continue
            if g is None:  # no gradient reached the rows (they took no part in the loss)
                g = torch.zeros(u.numel(), int(self._config(name).embedding_dim), device=u.device)
            g = g.detach().to(torch.float32)
            if self.grad_scale != 1.0:
                g = g * self.grad_scale
            entries.append((self._tables[name], u, g.contiguous()))
            self.rows_pushed += u.numel()
        if entries:
            self._pending.append(self.worker.push_sparse_many(entries))
            self.requests += 1

    def _config(self, name):
        return next(t for t in self.configs if t.name == name)

    def flush(self):
        """Waits for the pushes in flight; raises the first failure."""
        pending, self._pending = self._pending, []
        for h in pending:
            h.wait(self.timeout)

    def _rows(self, kjt):
        kjt = as_keyed_jagged(kjt)
        self._check_features(kjt)
        keys, inverses = self._plan(kjt)
        self.flush()
        trigger = torch.empty(0, requires_grad=torch.is_grad_enabled())
        rows = _PullMany.apply(trigger, self, keys) if keys else ()
        return kjt, rows, inverses

    # --- state_dict: the servers' rows, for tables of known size ------------------------
    _STATE_CHUNK = 65536

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        """``state_dict()`` holds ``<table>.weight`` for every table: all its rows, pulled
        from the servers. A hashed table (num_embeddings=None) cannot list its rows:
        FailedPreconditionError (use the servers' checkpoints)."""
        self.flush()
        for t in self.configs:
            if t.num_embeddings is None:
                raise FailedPreconditionError(f"table '{t.name}': a hashed table cannot list its rows for "
                                              "state_dict(); use the servers' checkpoints")
            weight = torch.empty(t.num_embeddings, int(t.embedding_dim), dtype=torch.float32)
            for start in range(0, t.num_embeddings, self._STATE_CHUNK):
                ids = torch.arange(start, min(t.num_embeddings, start + self._STATE_CHUNK), dtype=torch.int64)
                self.worker.pull_sparse(self._tables[t.name], ids, weight[start:start + ids.numel()]).wait(self.timeout)
            destination[prefix + t.name + ".weight"] = weight

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        self.flush()
        for t in self.configs:
            key = prefix + t.name + ".weight"
            if key not in state_dict:
                if strict:
                    missing_keys.append(key)
                continue
            weight = torch.as_tensor(state_dict[key]).detach().to(torch.float32).contiguous()
            if t.num_embeddings is None or tuple(weight.shape) != (t.num_embeddings, int(t.embedding_dim)):
                error_msgs.append(f"table '{t.name}': weight of shape {tuple(weight.shape)}, expected "
                                  f"({t.num_embeddings}, {t.embedding_dim})")
                continue
            handles = []
            for start in range(0, t.num_embeddings, self._STATE_CHUNK):
                ids = torch.arange(start, min(t.num_embeddings, start + self._STATE_CHUNK), dtype=torch.int64)
                handles.append(self.worker.assign_sparse(self._tables[t.name], ids, weight[start:start + ids.numel()]))
            for h in handles:
                h.wait(self.timeout)


class EmbeddingBagCollection(_Collection):
    """Pooled lookups of many features in many tables held by the servers (TorchRec's
    EmbeddingBagCollection): ``forward(features)`` takes a ``KeyedJaggedTensor`` (ours or
    TorchRec's) and returns a ``KeyedTensor`` of (batch, sum of dims), each feature's bag
    pooled by its table's ``pooling`` (weighted by the input's per-id weights when
    ``is_weighted``; an empty bag gives zeros). One fused pull per server per forward, one
    fused push per server per backward; the servers apply each table's rule. The pushed
    gradient is scaled by ``grad_scale`` (default 1/number of workers: the servers sum the
    workers' pushes, so they apply the global batch's mean gradient, as an averaged
    all-reduce of the dense part does). Every worker must build it from the same configs
    (checked with an all-gather when there are several workers). The next forward, or
    ``flush()``, waits for the pushes in flight."""

    _POOLED = True

    def forward(self, features):
        kjt, rows, inverses = self._rows(features)
        blocks, dims = [], []
        for k in kjt.keys():
            t = self._feature_table[k]
            table_index, inverse, offsets, weights = inverses[k]
            w = weights.to(torch.float32) if (self.is_weighted and weights is not None) else None
            pooled = torch.nn.functional.embedding_bag(
                inverse, rows[table_index], offsets[:-1], mode=t.pooling if w is None else "sum",
                per_sample_weights=w, include_last_offset=False)
            if w is not None and t.pooling == "mean":
                counts = (offsets[1:] - offsets[:-1]).clamp(min=1).to(torch.float32)
                pooled = pooled / counts[:, None]
            blocks.append(pooled)
            dims.append(int(t.embedding_dim))
        values = torch.cat(blocks, dim=1) if blocks else torch.zeros(kjt.stride(), 0, device=kjt.values().device)
        return KeyedTensor(kjt.keys(), dims, values)


class EmbeddingCollection(_Collection):
    """Unpooled lookups (TorchRec's EmbeddingCollection): ``forward(features)`` returns
    {feature: JaggedTensor} whose values are (ids, dim) rows. Fused requests, gradient
    scale and agreement as for EmbeddingBagCollection; weights are not taken."""

    _POOLED = False

    def forward(self, features):
        kjt, rows, inverses = self._rows(features)
        out = {}
        for k in kjt.keys():
            table_index, inverse, offsets, _ = inverses[k]
            out[k] = JaggedTensor(rows[table_index][inverse], offsets[1:] - offsets[:-1], offsets)
        return out
