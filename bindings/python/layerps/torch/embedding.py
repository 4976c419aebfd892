"""Embedding and EmbeddingBag: embedding tables whose rows live on the servers; forward
pulls only the batch's unique rows, backward pushes only their gradient rows."""

import itertools

import torch

from ..errors import FailedPreconditionError, InvalidArgumentError
from ._common import worker_or_default as _worker

class _PullRows(torch.autograd.Function):
    """rows = the server's rows of `keys`; backward pushes the rows' gradient."""

    @staticmethod
    def forward(ctx, trigger, keys, module):
        ctx.keys = keys
        ctx.module = module
        return module._pull_rows(keys)

    @staticmethod
    def backward(ctx, grad_rows):
        ctx.module._push_grad(ctx.keys, grad_rows)
        return None, None, None


_embedding_counter = itertools.count()


class Embedding(torch.nn.Module):
    """An embedding table held by the servers (a sparse table; rule 'sgd' unless ``rule``
    names another).

    ``forward(ids)`` takes integer ids of any shape and returns ``ids.shape + (dim,)``
    float32 rows. It pulls only the batch's unique ids; backward pushes the summed
    gradient of each unique row (times ``grad_scale``), and the servers apply the rule
    (``row -= lr * grad`` for 'sgd'): the rows are trained by the servers, not by a local
    optimizer (the module has no local parameters). ``rule`` is any sparse rule of
    docs/sparse.md ('sgd', 'adagrad', 'rowwise_adagrad', 'adam', 'ftrl', 'momentum',
    'nesterov', 'sum') and its hyper-parameters are keyword arguments (``eps=``,
    ``beta1=``, ``l1=``, ...), checked by name. The pushed gradient is summed on the
    servers over the workers: with W workers each averaging its loss over its own batch,
    ``grad_scale=1/W`` makes the servers apply the global batch's mean gradient, as an
    averaged all-reduce does for the dense part (``EmbeddingBagCollection`` does so by
    default). Pushes are asynchronous; the next forward (or
    ``flush()``) waits for them, so a worker always sees its own updates.

    ``num_embeddings``: ids must lie in [0, num_embeddings); None for hashed ids (any
    64-bit value, e.g. a feature hash). Rows are created on first touch on the servers
    with ``init`` ('uniform' in [init_a, init_b), 'normal' (mean init_a, std init_b) or
    'zeros'), seeded by (seed, table name, id), so every worker and run agrees.

    Give each Embedding a ``name`` (the table's name): workers must agree on it.

    ``capacity``, ``eviction``, ``expiry_steps``, ``admit_after``, ``admit_probability``
    bound the table's rows on each server, as for ``Worker.declare_sparse``
    (docs/sparse.md): an evicted or not yet admitted id reads as its initial value.

    ``cache_rows`` and ``cache_staleness`` give the worker a cache of pulled rows
    (docs/sparse.md "Worker cache"): a forward reuses a row pulled fewer than
    ``cache_staleness`` backward passes ago instead of pulling it again, so within that
    window the worker does not see the updates of its own (or others') pushes to it.
    """

    def __init__(self, num_embeddings, embedding_dim, *, worker=None, name=None, rule="sgd", lr=0.01,
                 init="uniform", init_a=-0.05, init_b=0.05, seed=0, grad_scale=1.0, timeout=None,
                 capacity=0, eviction=None, expiry_steps=0, admit_after=0, admit_probability=1.0,
                 cache_rows=0, cache_staleness=0, **hyper):
        super().__init__()
        if num_embeddings is not None and int(num_embeddings) < 1:
            raise InvalidArgumentError("num_embeddings must be >= 1 (or None for hashed ids)")
        if int(embedding_dim) < 1:
            raise InvalidArgumentError("embedding_dim must be >= 1")
        self.num_embeddings = None if num_embeddings is None else int(num_embeddings)
        self.embedding_dim = int(embedding_dim)
        self.worker = _worker(worker)
        self.name = name if name is not None else f"layerps.embedding.{next(_embedding_counter)}"
        self.grad_scale = float(grad_scale)
        self.timeout = timeout
        self.rule = rule
        self.table = self.worker.declare_sparse(self.name, self.embedding_dim, rule, lr=lr, init=init,
                                                init_a=init_a, init_b=init_b, seed=seed,
                                                capacity=capacity, eviction=eviction,
                                                expiry_steps=expiry_steps, admit_after=admit_after,
                                                admit_probability=admit_probability,
                                                cache_rows=cache_rows, cache_staleness=cache_staleness,
                                                **hyper)
        self._pending = []
        self.rows_pulled = 0
        self.rows_pushed = 0

    def extra_repr(self):
        n = "hashed" if self.num_embeddings is None else self.num_embeddings
        return (f"{n}, {self.embedding_dim}, table='{self.name}', rule='{self.rule}', "
                f"lr={self.table.spec.learning_rate:g}")

    def _ids(self, ids):
        ids = torch.as_tensor(ids)
        if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
            raise InvalidArgumentError(f"Embedding '{self.name}': ids must be integers, got {ids.dtype}")
        ids = ids.to(torch.int64)
        if self.num_embeddings is not None and ids.numel():
            lo, hi = int(ids.min()), int(ids.max())
            if lo < 0 or hi >= self.num_embeddings:
                raise InvalidArgumentError(f"Embedding '{self.name}': ids must lie in [0, {self.num_embeddings}), "
                                           f"got values in [{lo}, {hi}]")
        return ids

    def forward(self, ids):
        ids = self._ids(ids)
        self.flush()
        keys, inverse = torch.unique(ids.reshape(-1), return_inverse=True)
        trigger = torch.empty(0, requires_grad=torch.is_grad_enabled())
        rows = _PullRows.apply(trigger, keys, self)
        return rows[inverse].reshape(*ids.shape, self.embedding_dim)

    def pull(self, ids):
        """The servers' current rows for ``ids`` (no autograd)."""
        ids = self._ids(ids)
        self.flush()
        return self._pull_rows(ids.reshape(-1)).reshape(*ids.shape, self.embedding_dim)

    def flush(self):
        """Waits for this module's pushes in flight; raises the first failure."""
        pending, self._pending = self._pending, []
        for h in pending:
            h.wait(self.timeout)

    def _pull_rows(self, keys):
        # On the keys' device: CUDA keys pull through the device route into GPU memory.
        out = torch.empty(keys.numel(), self.embedding_dim, dtype=torch.float32, device=keys.device)
        self.worker.pull_sparse(self.table, keys, out).wait(self.timeout)
        self.rows_pulled += keys.numel()
        return out

    def _push_grad(self, keys, grad_rows):
        g = grad_rows.detach().to(torch.float32)
        if self.grad_scale != 1.0:
            g = g * self.grad_scale
        self._pending.append(self.worker.push_sparse(self.table, keys, g.contiguous()))
        self.rows_pushed += keys.numel()

    # --- state_dict: the servers' rows --------------------------------------------------
    _STATE_CHUNK = 65536  # rows per pull/assign when saving or loading

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        """``state_dict()`` holds ``weight``: every row, pulled from the servers (an
        (num_embeddings, dim) tensor). A hashed table (num_embeddings=None) cannot list
        its rows: FailedPreconditionError."""
        if self.num_embeddings is None:
            raise FailedPreconditionError(
                f"Embedding '{self.name}': a hashed table (num_embeddings=None) cannot list its rows "
                "for state_dict(); use the servers' checkpoints")
        self.flush()
        weight = torch.empty(self.num_embeddings, self.embedding_dim, dtype=torch.float32)
        for start in range(0, self.num_embeddings, self._STATE_CHUNK):
            keys = torch.arange(start, min(self.num_embeddings, start + self._STATE_CHUNK), dtype=torch.int64)
            weight[start:start + keys.numel()] = self._pull_rows(keys)
        destination[prefix + "weight"] = weight

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        """``load_state_dict()`` assigns every row of ``weight`` on the servers (every
        worker may call it: the same values are assigned)."""
        key = prefix + "weight"
        if key not in state_dict:
            if strict:
                missing_keys.append(key)
            return
        weight = torch.as_tensor(state_dict[key])
        if self.num_embeddings is None or tuple(weight.shape) != (self.num_embeddings, self.embedding_dim):
            error_msgs.append(f"Embedding '{self.name}': weight of shape {tuple(weight.shape)}, expected "
                              f"({self.num_embeddings}, {self.embedding_dim})")
            return
        self.flush()
        weight = weight.detach().to(torch.float32).contiguous()
        handles = []
        for start in range(0, self.num_embeddings, self._STATE_CHUNK):
            keys = torch.arange(start, min(self.num_embeddings, start + self._STATE_CHUNK), dtype=torch.int64)
            handles.append(self.worker.assign_sparse(self.table, keys, weight[start:start + keys.numel()]))
        for h in handles:
            h.wait(self.timeout)


class EmbeddingBag(Embedding):
    """Sums or averages bags of embedding rows held by the servers, as
    ``torch.nn.EmbeddingBag``: ``forward(input, offsets=None)`` with a 2-D ``input`` (each
    row a bag of equal length) or a 1-D ``input`` and ``offsets`` (bag i is
    input[offsets[i]:offsets[i+1]]); returns (bags, dim). ``mode`` 'sum' or 'mean' (an empty
    bag gives zeros). Only the batch's unique ids are pulled; backward pushes each unique
    row's summed gradient; the servers apply the rule. Other arguments, and
    ``state_dict()``/``load_state_dict()``, as for :class:`Embedding`."""

    def __init__(self, num_embeddings, embedding_dim, *, mode="mean", **kwargs):
        if mode not in ("sum", "mean"):
            raise InvalidArgumentError(f"EmbeddingBag: mode must be 'sum' or 'mean', not {mode!r}")
        super().__init__(num_embeddings, embedding_dim, **kwargs)
        self.mode = mode

    def extra_repr(self):
        return super().extra_repr() + f", mode='{self.mode}'"

    def forward(self, input, offsets=None):
        ids = self._ids(input)
        if ids.dim() == 2:
            if offsets is not None:
                raise InvalidArgumentError("EmbeddingBag: offsets belong to a 1-D input")
            bags, length = ids.shape
            offsets = torch.arange(0, bags * length, length, dtype=torch.int64, device=ids.device)
            ids = ids.reshape(-1)
        elif ids.dim() == 1:
            if offsets is None:
                raise InvalidArgumentError("EmbeddingBag: a 1-D input needs offsets")
            offsets = torch.as_tensor(offsets).to(device=ids.device, dtype=torch.int64)
            if offsets.dim() != 1 or (offsets.numel() and (int(offsets[0]) != 0 or
                                                          bool((offsets[1:] < offsets[:-1]).any()) or
                                                          int(offsets[-1]) > ids.numel())):
                raise InvalidArgumentError("EmbeddingBag: offsets must be 1-D, start at 0, not decrease "
                                           "and not pass the input's length")
        else:
            raise InvalidArgumentError(f"EmbeddingBag: input must be 1-D or 2-D, got {ids.dim()}-D")
        self.flush()
        keys, inverse = torch.unique(ids, return_inverse=True)
        trigger = torch.empty(0, requires_grad=torch.is_grad_enabled())
        rows = _PullRows.apply(trigger, keys, self)
        return torch.nn.functional.embedding_bag(inverse, rows, offsets, mode=self.mode)
