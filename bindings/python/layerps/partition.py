"""Partition search for sparse tables: how many partitions P an embedding is split into.

In LayerPS a partitioned embedding is P sparse tables: row ``r`` lives in partition
``r mod P``, and partition ``k`` is pinned to server rank ``k mod M`` (a placement, one
layer per partition; docs/python.md, "The hybrid"). More partitions spread the rows'
traffic and updates over more servers (the work per partition falls as ``b/P``) but cost
one more request per partition and step (``a(P-1)``), hence the cost model

    t(P) = a (P - 1) + b / P + c

The search (Parallax's): start at ``P0 = max(machines, p_min)``; double P while the
measured step time improves, otherwise halve it while it improves; once three or more
points exist, fit ``a, b, c`` by least squares and take the integer argmin of the fit in
the range tried. The fitted pick is measured too when it was not, and the search returns
the best measured point (so a poor fit never makes the answer worse than a trial).

Pure Python (numpy only): :func:`search` takes any ``measure(P) -> seconds``.
``layerps.torch.DistributedOptimizer.search_partitions`` runs it on real training steps.
"""

import math

import numpy as np

from .errors import InvalidArgumentError

__all__ = ["fit_cost", "search", "check_partitions"]


def check_partitions(p, rows=None, what="partitions"):
    """``p`` as an int; InvalidArgumentError unless 1 <= p (<= rows when rows is known)."""
    if isinstance(p, bool) or not isinstance(p, (int, np.integer)):
        raise InvalidArgumentError(f"{what}: expected an integer number of partitions, got {p!r}")
    p = int(p)
    if p < 1:
        raise InvalidArgumentError(f"{what}: the number of partitions must be >= 1, got {p}")
    if rows is not None and p > rows:
        raise InvalidArgumentError(f"{what}: {p} partitions for {rows} rows (at most one partition per row)")
    return p


def fit_cost(points):
    """Least-squares fit of t(P) = a(P-1) + b/P + c to ``points`` [(P, t)] (at least three
    distinct P). Returns (a, b, c)."""
    ps = sorted({int(p) for p, _ in points})
    if len(ps) < 3:
        raise InvalidArgumentError(f"fit_cost needs three distinct P, got {ps}")
    x = np.array([[p - 1.0, 1.0 / p, 1.0] for p, _ in points])
    y = np.array([float(t) for _, t in points])
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    return tuple(float(v) for v in coef)


def _argmin_fit(coef, lo, hi):
    a, b, c = coef
    best, best_t = lo, math.inf
    for p in range(lo, hi + 1):
        t = a * (p - 1) + b / p + c
        if t < best_t:
            best, best_t = p, t
    return best


def search(measure, machines, p_min=1, p_max=None, verify=True):
    """Searches P in [p_min, p_max] with ``measure(P)`` (seconds per step; lower is
    better). Returns ``(P, history)``: the chosen P and the list of (P, seconds) measured
    in order. ``p_max`` None: no upper bound other than doubling stopping to improve."""
    p_min = check_partitions(p_min, what="p_min")
    if p_max is not None:
        p_max = check_partitions(p_max, what="p_max")
        if p_max < p_min:
            raise InvalidArgumentError(f"p_max {p_max} < p_min {p_min}")
    machines = max(1, int(machines))
    history = []
    seen = {}

    def at(p):
        if p not in seen:
            t = float(measure(p))
            if not math.isfinite(t):
                raise InvalidArgumentError(f"measure({p}) returned {t}")
            seen[p] = t
            history.append((p, t))
        return seen[p]

    p0 = max(machines, p_min)
    if p_max is not None:
        p0 = min(p0, p_max)
    best = p0
    at(p0)
    grew = False
    p = p0
    while p_max is None or 2 * p <= p_max:  # double while it improves
        if at(2 * p) < at(p):
            p, grew = 2 * p, True
        else:
            break
    best = p
    if not grew:
        p = p0
        while p // 2 >= p_min:  # else halve while it improves
            if at(p // 2) < at(p):
                p //= 2
            else:
                break
        best = p
    if len(seen) >= 3:
        lo, hi = min(seen), max(seen)
        pick = _argmin_fit(fit_cost(list(seen.items())), lo, hi)
        if verify:
            at(pick)
            best = min(seen, key=lambda q: (seen[q], q))
        else:
            best = pick
    return best, history
