"""Elastic training (Horovod's ``hvd.elastic``): the job grows and shrinks while it trains.

A job is elastic when its scheduler has ``max_workers`` above ``num_workers``
(docs/recovery.md, "Elastic jobs"): workers started later join the running job (a dead
worker's rank, or a new one), and a worker's death does not end it while at least
``min_workers`` are live. This module keeps the training state consistent across those
changes, as Horovod's does::

    import layerps.torch.elastic as elastic

    state = elastic.TorchState(model, optimizer, epoch=0, batch=0)

    @elastic.run
    def train(state):
        for state.batch in range(state.batch, batches):
            loss = step(model, optimizer, data(state.batch), state.process_set)
            state.commit()

    train(state)

* :meth:`State.commit` saves a copy of the state (for :meth:`State.restore`) and checks
  for a change of membership: when there is one, every live worker raises
  :class:`HostsUpdatedInterrupt` at the same commit.
* :func:`run` calls ``func(state)``; on :class:`HostsUpdatedInterrupt` it syncs the state
  and calls ``func`` again; when a collective fails because a member died
  (:class:`~layerps.errors.UnavailableError` naming it) it restores the last commit
  first. Before each call the reset callbacks run (:meth:`State.register_reset_callbacks`).
* :meth:`State.sync` gives every worker the same state: ``mode="allreduce"`` broadcasts
  it from the lowest live rank among the live workers (:attr:`State.process_set`);
  ``mode="server"`` has every worker pull the tables' current values (the parameters live
  on the servers; a joining worker pulls them) and broadcasts nothing.

What differs from Horovod: ranks are not renumbered. A worker keeps its rank for its
life; the live ranks may have gaps (a dead rank stays free until a worker takes it).
Collectives among the live workers name them: pass ``state.process_set`` (Horovod's
``hvd.size()`` becomes ``state.size``). The decision that membership changed is rank
``min(live)``'s view, broadcast at each commit (allreduce mode), so every member raises
at the same step.
"""

import copy
import functools
import time

import torch

from .. import cluster as _cluster
from ..collectives import ProcessSet
from ..errors import FailedPreconditionError, InvalidArgumentError, UnavailableError
from . import ops as _ops

__all__ = ["HostsUpdatedInterrupt", "State", "ObjectState", "TorchState", "run", "live_workers"]

# How long a worker waits for its own map to show a change of membership that another
# worker (the root) already saw, or a death that failed its collective.
VIEW_TIMEOUT_S = 60.0


class HostsUpdatedInterrupt(RuntimeError):
    """The job's membership changed (Horovod's name): :func:`run` syncs and calls the
    function again. ``skip_sync``: the state needs no sync (nobody joined)."""

    def __init__(self, skip_sync=False, message="the job's workers changed"):
        super().__init__(message)
        self.skip_sync = skip_sync


def live_workers(worker=None):
    """The live workers as ``{rank: node id}`` (from this worker's cluster map)."""
    w = worker or _cluster.default_worker()
    return {int(n.rank): int(n.id) for n in w.nodes()
            if str(n.role).lower().endswith("worker") and n.alive}


class State:
    """What :func:`run` keeps consistent: subclasses say what to save, restore and sync.

    ``mode``: ``"allreduce"`` (the state is broadcast from the lowest live rank) or
    ``"server"`` (the parameters live on the servers: :meth:`sync` pulls them)."""

    def __init__(self, worker=None, mode="allreduce"):
        if mode not in ("allreduce", "server"):
            raise InvalidArgumentError(f"mode must be 'allreduce' or 'server', not {mode!r}")
        self._worker = worker
        self.mode = mode
        self._reset_callbacks = []
        self._members = live_workers(self.worker)  # rank -> node id, as last agreed

    @property
    def worker(self):
        return self._worker or _cluster.default_worker()

    @property
    def rank(self):
        return int(self.worker.rank)

    @property
    def ranks(self):
        """The live ranks this state trains among, sorted."""
        return sorted(self._members)

    @property
    def size(self):
        return len(self._members)

    @property
    def root_rank(self):
        """The rank the state is broadcast from: the lowest live one."""
        return self.ranks[0]

    @property
    def process_set(self):
        """The live workers, for collectives: ``allreduce(t, process_set=state.process_set)``."""
        return ProcessSet(self.ranks)

    def register_reset_callbacks(self, callbacks):
        """Functions called (without arguments) after every change of membership, before
        ``func`` runs again: rescale the learning rate to :attr:`size`, repartition data."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        for cb in self._reset_callbacks:
            cb()

    def commit(self):
        """Saves the state (what :meth:`restore` goes back to), then raises
        :class:`HostsUpdatedInterrupt` on every live worker when the membership changed."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        mine = live_workers(self.worker)
        if self.mode == "allreduce" and len(self._members) > 1:
            # The root's view decides, so that every member raises at the same commit.
            seen = _ops.broadcast_object(sorted(mine.items()), root_rank=self.root_rank,
                                         process_set=self.process_set, name="layerps.elastic.members",
                                         worker=self.worker)
            view = dict(seen)
        else:
            view = mine
        if view == self._members:
            return
        joined = any(r not in self._members or self._members[r] != i for r, i in view.items())
        self._await_view(view)
        self._members = view
        raise HostsUpdatedInterrupt(skip_sync=not joined)

    def _await_view(self, view):
        """Waits (bounded) until this worker's map shows `view` (another worker's)."""
        deadline = time.monotonic() + VIEW_TIMEOUT_S
        while live_workers(self.worker) != view:
            if time.monotonic() > deadline:
                raise FailedPreconditionError(
                    f"rank {self.rank}: the live workers {sorted(view)} the others see did not reach this "
                    f"worker's cluster map within {VIEW_TIMEOUT_S} s (it shows "
                    f"{sorted(live_workers(self.worker))})")
            time.sleep(0.02)

    def _after_failure(self):
        """A collective failed (a member died): waits (bounded) until this worker's map
        shows the membership changed, then trains among the live workers it shows."""
        deadline = time.monotonic() + VIEW_TIMEOUT_S
        while live_workers(self.worker) == self._members:
            if time.monotonic() > deadline:
                raise FailedPreconditionError(
                    f"rank {self.rank}: a collective failed for a member's death, but this worker's cluster "
                    f"map still shows the live workers {self.ranks} after {VIEW_TIMEOUT_S} s")
            time.sleep(0.02)
        self._members = live_workers(self.worker)

    def save(self):
        raise NotImplementedError

    def restore(self):
        raise NotImplementedError

    def sync(self):
        raise NotImplementedError


class ObjectState(State):
    """Plain Python attributes (``epoch=0, batch=0``) kept, restored and synced as Horovod's
    ObjectState: ``state.epoch`` reads and writes them."""

    def __init__(self, worker=None, mode="allreduce", **attributes):
        super().__init__(worker=worker, mode=mode)
        self._attributes = list(attributes)
        for k, v in attributes.items():
            setattr(self, k, v)
        self._saved = copy.deepcopy(attributes)

    def _values(self):
        return {k: getattr(self, k) for k in self._attributes}

    def save(self):
        self._saved = copy.deepcopy(self._values())

    def restore(self):
        for k, v in copy.deepcopy(self._saved).items():
            setattr(self, k, v)

    def sync(self):
        if self.size > 1:
            values = _ops.broadcast_object(self._values(), root_rank=self.root_rank, process_set=self.process_set,
                                           name="layerps.elastic.objects", worker=self.worker)
            for k, v in values.items():
                setattr(self, k, v)
        self.save()


class TorchState(ObjectState):
    """A model, its optimizer and plain attributes (Horovod's TorchState).

    ``mode="server"``: ``tables`` maps each parameter tensor of the model to the dense
    table (``Worker.declare_dense``) that holds it on the servers; :meth:`sync` pulls them
    into the model. ``mode="allreduce"``: the model and the optimizer's state are
    broadcast from the lowest live rank."""

    def __init__(self, model=None, optimizer=None, worker=None, mode="allreduce", tables=None, **attributes):
        self.model = model
        self.optimizer = optimizer
        self.tables = list(tables or [])
        super().__init__(worker=worker, mode=mode, **attributes)
        self._saved_model = None
        self._saved_optimizer = None
        self.save()

    def save(self):
        super().save()
        if self.model is not None:
            self._saved_model = copy.deepcopy(self.model.state_dict())
        if self.optimizer is not None:
            self._saved_optimizer = copy.deepcopy(self.optimizer.state_dict())

    def restore(self):
        super().restore()
        if self.model is not None and self._saved_model is not None:
            self.model.load_state_dict(self._saved_model)
        if self.optimizer is not None and self._saved_optimizer is not None:
            self.optimizer.load_state_dict(self._saved_optimizer)

    def sync(self):
        if self.mode == "server":
            w = self.worker
            with torch.no_grad():
                for tensor, table in self.tables:
                    flat = torch.empty(tensor.numel(), dtype=torch.float32, device=tensor.device)
                    w.pull(table, flat).wait(timeout=VIEW_TIMEOUT_S)
                    tensor.copy_(flat.view_as(tensor))
        elif self.size > 1:
            if self.model is not None:
                _ops.broadcast_parameters(self.model.state_dict(), root_rank=self.root_rank,
                                          process_set=self.process_set, worker=self.worker,
                                          name="layerps.elastic.model")
            if self.optimizer is not None:
                _ops.broadcast_optimizer_state(self.optimizer, root_rank=self.root_rank,
                                               process_set=self.process_set, worker=self.worker,
                                               name="layerps.elastic.optimizer")
        super().sync()


def _member_died(error):
    return isinstance(error, UnavailableError) and ("died" in str(error) or "left" in str(error))


def run(func):
    """Decorator (Horovod's ``hvd.elastic.run``): ``func(state, ...)`` is called, after
    ``state.sync()``, until it returns. A change of membership
    (:class:`HostsUpdatedInterrupt` from a commit) syncs and calls it again; a collective
    that failed because a member died restores the last commit, syncs among the
    survivors and calls it again. Other errors propagate."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            except UnavailableError as e:
                if not _member_died(e):
                    raise
                state.restore()
                state._after_failure()
                skip_sync = False
            state.on_reset()

    return wrapper
