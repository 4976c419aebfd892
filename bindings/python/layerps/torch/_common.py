"""What the modules of layerps.torch share: the worker a call runs on, and the (name,
tensor) pairs a call takes."""

import torch

from ..cluster import default_worker
from ..errors import InvalidArgumentError


def worker_or_default(worker):
    """``worker``, or the default worker of layerps.init() when it is None."""
    return worker if worker is not None else default_worker()


def named_tensors(params, what):
    """[(name, tensor)] from named_parameters(), a dict / state_dict, or a list of tensors."""
    if isinstance(params, dict):
        items = list(params.items())
    else:
        items = list(params)
        if items and isinstance(items[0], torch.Tensor):
            items = [(f"p{i}", t) for i, t in enumerate(items)]
    for it in items:
        if not (isinstance(it, tuple) and len(it) == 2 and isinstance(it[1], torch.Tensor)):
            raise InvalidArgumentError(f"{what}: expected (name, tensor) pairs, a dict of tensors or tensors")
    names = [n for n, _ in items]
    if len(set(names)) != len(names):
        raise InvalidArgumentError(f"{what}: parameter names are not unique")
    return items
