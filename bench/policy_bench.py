#!/usr/bin/env python3
"""What bounding a sparse table costs in accuracy (docs/sparse.md): held-out log loss and
AUC of the same click-through model trained with an unbounded table, with LRU or LFU
eviction at one capacity, and with admission after k = 2 and 4 sightings, with the same
seeds and the same stream.

The stream and the model are bench/cache_bench.py's: ids from a Zipf law over 10^9 ids,
labels from a known logistic model, sparse logistic regression on the servers (dim 1,
SGD). The metric is progressive validation, as in online click-through training: each
batch is predicted with the weights pulled for it, before its gradient is pushed, and
the log loss and AUC are taken over the last `--eval_steps` steps. A separate held-out
read would itself create rows in a bounded table and evict the trained ones. Rows held
are read from the servers' counters at the end.

    PYTHONPATH=build/bindings/python python3 bench/policy_bench.py --capacity 20000

Under layerps-launch (--launched, one policy per launch), every worker trains on its own
stream (seed + rank) against the launched servers and prints its own figures:

    layerps-launch --num_servers=2 --num_workers=2 --quiet_daemons -- \
        python3 bench/policy_bench.py --launched --policies lru --capacity 20000

The results page is bench/SPARSE.md.
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cache_bench import ids_of, labels  # noqa: E402  (the same stream)

import layerps  # noqa: E402

POLICIES = {
    "unbounded": {},
    "lru": {"capacity": None, "eviction": "lru"},
    "lfu": {"capacity": None, "eviction": "lfu"},
    "decayed": {"capacity": None, "eviction": "decayed"},
    "lru+admit2": {"capacity": None, "eviction": "lru", "admit_after": 2},
    "lru+admit4": {"capacity": None, "eviction": "lru", "admit_after": 4},
}


def auc(y, p):
    order = np.argsort(p, kind="mergesort")
    ranks = np.empty(len(p))
    ranks[order] = np.arange(1, len(p) + 1)
    pos = y == 1
    n1, n0 = pos.sum(), (~pos).sum()
    return float((ranks[pos].sum() - n1 * (n1 + 1) / 2) / max(1, n1 * n0))


def train(w, policy, a, seed):
    """Trains on this worker's stream; returns (progressive log loss, AUC)."""
    bounds = {k: (a.capacity if v is None else v) for k, v in POLICIES[policy].items()}
    t = w.declare_sparse("lr", 1, "sgd", lr=a.lr, **bounds)
    rng = np.random.default_rng(seed)
    ys, ps = [], []
    for step in range(a.steps):
        ids = ids_of(rng, a.batch, a.fields, a.zipf)
        y = labels(rng, ids)
        flat = ids.reshape(-1)
        wts = w.pull_sparse(t, flat).wait(timeout=120).reshape(a.batch, a.fields)
        p = 1.0 / (1.0 + np.exp(-wts.sum(axis=1)))
        if step >= a.steps - a.eval_steps:
            ys.append(y)
            ps.append(p)
        g = np.repeat((p - y)[:, None], a.fields, axis=1).reshape(-1, 1).astype(np.float32)
        w.push_sparse(t, flat, g / a.batch).wait(timeout=120)
    y = np.concatenate(ys)
    p = np.clip(np.concatenate(ps), 1e-7, 1 - 1e-7)
    loss = float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).mean())
    return loss, auc(y, p)


def run(policy, a):
    with layerps.LocalCluster(num_servers=a.servers, num_workers=1, transport="tcp",
                              request_timeout_ms=120_000) as c:
        loss, area = train(c.workers[0], policy, a, a.seed)
        rows = sum(s.table_stats()["lr"]["rows_live"] for s in c.servers)
        return loss, area, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--capacity", type=int, default=20000, help="rows per server for the bounded policies")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--eval_steps", type=int, default=100, help="the last steps whose predictions are scored")
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--fields", type=int, default=20)
    ap.add_argument("--zipf", type=float, default=1.1)
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--launched", action="store_true",
                    help="be one worker of a cluster started by layerps-launch (one policy)")
    a = ap.parse_args()
    chosen = a.policies.split(",")
    unknown = [p for p in chosen if p not in POLICIES]
    if unknown:
        ap.error(f"unknown policies {unknown} (known: {', '.join(POLICIES)})")
    if not 1 <= a.eval_steps <= a.steps:
        ap.error("--eval_steps must be in [1, --steps]")
    if a.capacity < 1 or a.steps < 1 or a.batch < 1 or a.fields < 1 or a.zipf <= 1:
        ap.error("capacity/steps/batch/fields >= 1, zipf > 1")
    if a.launched:
        if len(chosen) != 1:
            ap.error("--launched takes one policy")
        w = layerps.init(request_timeout_ms=120_000)
        loss, area = train(w, chosen[0], a, a.seed + 1000 * w.rank)
        print(f"worker {w.rank} of {w.num_workers}: {chosen[0]:<11} progressive log loss {loss:.4f}  "
              f"AUC {area:.4f}", flush=True)
        w.stop()
        return 0
    print(f"policy_bench: zipf {a.zipf} over 1e9 ids, {a.batch} x {a.fields} ids per step, {a.steps} steps, "
          f"{a.servers} servers, capacity {a.capacity} rows per server, lr {a.lr}", flush=True)
    for policy in chosen:
        loss, area, rows = run(policy, a)
        print(f"{policy:<11} progressive log loss {loss:.4f}  AUC {area:.4f}  rows held {rows}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
