"""The seven training algorithms (BSP, ASP, SSP, EASGD, AR-SGD, GoSGD, AD-PSGD) over one
flat parameter buffer: :class:`Trainer` wraps the C++ ``ps::Trainer``
(include/ps/algorithm.h; docs/algorithms.md has each algorithm's rule).

    import layerps
    from layerps.algorithms import Trainer
    w = layerps.init()
    x = np.zeros(n, dtype=np.float32)            # the model, updated in place
    t = Trainer(x, "ssp(s=2)", lr=0.1, momentum=0.9)
    for step in range(steps):
        t.step(gradient(x))                       # this worker's mean gradient
    t.finish()

PyTorch users pass ``algorithm=`` to ``layerps.torch.DistributedOptimizer``.
"""

from . import _core
from ._arrays import as_input, as_output
from .cluster import default_worker
from .errors import InvalidArgumentError

__all__ = ["ALGORITHMS", "Trainer", "parse_algorithm"]

#: The algorithm names ``Trainer`` accepts, with their parameters.
ALGORITHMS = ("bsp", "asp", "ssp(s)", "easgd(tau,alpha)", "arsgd", "gosgd(p)", "adpsgd")

_DECAYS = ("none", "step", "exponential", "cosine")


def parse_algorithm(text):
    """The canonical form of an algorithm string ('SSP(3)' -> 'ssp(s=3)'); raises
    InvalidArgumentError naming the bad parameter."""
    return _core.parse_algorithm(str(text))


class Trainer:
    """One training algorithm over ``params`` (a writable C-contiguous float32 numpy array
    or CPU torch tensor: the model, updated in place by ``step``). Collective: every
    worker builds it with the same algorithm, size and ``name``, and calls ``finish()``.

    The local update is SGD: ``lr``, ``momentum`` (``nesterov``), a linear warm-up over
    ``warmup_steps`` and a ``decay`` ('none', 'step', 'exponential' or 'cosine' with
    ``gamma`` and ``decay_every``) — the same switches for every algorithm. bsp, asp and
    ssp run it on the servers, the others on the worker. ``seed`` seeds the random
    choices (gossip targets, neighbours); ``timeout`` (seconds) bounds each wait.
    """

    def __init__(self, params, algorithm="bsp", *, lr, momentum=0.0, nesterov=False,
                 warmup_steps=0, decay="none", gamma=0.1, decay_every=0, name="model",
                 seed=0, timeout=None, worker=None):
        if decay not in _DECAYS:
            raise InvalidArgumentError(f"decay must be one of {_DECAYS}, not {decay!r}")
        self.worker = worker if worker is not None else default_worker()
        self.params = params
        self._buf = as_output(params, "Trainer params")
        self._t = _core.Trainer(self.worker._node, self._buf, str(algorithm), float(lr),
                                float(momentum), bool(nesterov), int(warmup_steps), decay,
                                float(gamma), int(decay_every), str(name), int(seed), timeout)

    @property
    def algorithm(self):
        """The algorithm in its canonical form, e.g. 'easgd(tau=4,alpha=0.5)'."""
        return self._t.algorithm

    def step(self, grad):
        """One training step with this worker's gradient (same size as params; for bsp,
        asp and ssp the mean over this worker's batch). Blocks, GIL released."""
        self._t.step(as_input(grad, "Trainer.step grad"))

    def finish(self):
        """Collective end: drains gossips and averagings in flight. Idempotent."""
        self._t.finish()

    def copy_params(self):
        """A consistent numpy copy of the parameters."""
        return self._t.copy_params()

    def stats(self):
        """{'steps', 'exchanges', 'merges', 'gossip_weight'}."""
        return self._t.stats()
