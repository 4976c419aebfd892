#!/usr/bin/env python3
"""The worker cache (docs/sparse.md "Worker cache") on a click-through stream: bytes
pulled per step, keys/s and log loss at cache staleness s = 0 (no cache), 1, 4, ...

The stream: each sample has `--fields` ids drawn from a Zipf law (exponent `--zipf`) over
10^9 ids, hashed over the 64-bit space. A known logistic model gives the labels: every
id has a true weight from a seeded normal law, and a sample's click probability is the
sigmoid of the sum of its ids' weights. The model trained is sparse logistic regression:
a sparse table of dim 1 with the SGD rule on the servers. Each step pulls the batch's
weights (through the cache), computes the log-loss gradient, and pushes it. The same
seeds are used for every s. Log loss is measured on a held-out stream after training,
with fresh pulls.

    PYTHONPATH=build/bindings/python python3 bench/cache_bench.py --steps 300

Prints one line per staleness; the results page is bench/SPARSE.md.
"""

import argparse
import sys
import time

import numpy as np

import layerps

SPACE = 10**9


def ids_of(rng, n, fields, exponent):
    r = rng.zipf(exponent, (n, fields)).astype(np.uint64) % np.uint64(SPACE)
    return (r * np.uint64(0x9E3779B97F4A7C15)).astype(np.int64)


def true_weight(ids):
    # A seeded normal weight per id: a hash of the id into two uniforms (Box-Muller).
    h = ids.astype(np.uint64) * np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(31)
    u1 = ((h >> np.uint64(11)).astype(np.float64) + 1.0) / 2.0**53
    u2 = ((h * np.uint64(0x94D049BB133111EB)) >> np.uint64(11)).astype(np.float64) / 2.0**53
    return 0.5 * np.sqrt(-2.0 * np.log(u1)) * np.cos(2 * np.pi * u2)


def labels(rng, ids):
    p = 1.0 / (1.0 + np.exp(-(true_weight(ids).sum(axis=1) - 0.5)))
    return (rng.random(len(p)) < p).astype(np.float32)


def run(staleness, a):
    opts = dict(dense_chunk_elems=1 << 16, request_timeout_ms=120_000)
    cache = dict(cache_rows=a.cache_rows, cache_staleness=staleness) if staleness else {}
    with layerps.LocalCluster(num_servers=a.servers, num_workers=1, transport="tcp", **opts) as c:
        w = c.workers[0]
        t = w.declare_sparse("lr", 1, "sgd", lr=a.lr, **cache)
        rng = np.random.default_rng(a.seed)
        before = w.stats()
        keys = 0
        t0 = time.perf_counter()
        for _ in range(a.steps):
            ids = ids_of(rng, a.batch, a.fields, a.zipf)
            y = labels(rng, ids)
            flat = ids.reshape(-1)
            wts = w.pull_sparse(t, flat).wait(timeout=120).reshape(a.batch, a.fields)
            p = 1.0 / (1.0 + np.exp(-wts.sum(axis=1)))
            g = np.repeat((p - y)[:, None], a.fields, axis=1).reshape(-1, 1).astype(np.float32)
            w.push_sparse(t, flat, g / a.batch).wait(timeout=120)
            keys += flat.size
        secs = time.perf_counter() - t0
        after = w.stats()
        # Held-out log loss, read fresh from the servers (a table without cache would be
        # another table: the cached one is read after enough pushes to expire every row).
        for _ in range(staleness):
            w.push_sparse(t, [0], np.zeros((1, 1), np.float32)).wait(timeout=60)
        ev = np.random.default_rng(a.seed + 1)
        ids = ids_of(ev, 20000, a.fields, a.zipf)
        y = labels(ev, ids)
        wts = w.pull_sparse(t, ids.reshape(-1)).wait(timeout=120).reshape(-1, a.fields)
        p = np.clip(1.0 / (1.0 + np.exp(-wts.sum(axis=1))), 1e-7, 1 - 1e-7)
        loss = float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).mean())
        pulled = (after["bytes_received"] - before["bytes_received"]) / a.steps
        hits, misses = after["cache_hits"] - before["cache_hits"], after["cache_misses"] - before["cache_misses"]
        return pulled, keys / secs, loss, hits / max(1, hits + misses)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--staleness", default="0,1,4,16", help="comma list; 0 = no cache")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--fields", type=int, default=20)
    ap.add_argument("--zipf", type=float, default=1.1)
    ap.add_argument("--cache_rows", type=int, default=1_000_000)
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--lr", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    try:
        stal = [int(s) for s in a.staleness.split(",")]
    except ValueError:
        ap.error("--staleness: a comma list of integers")
    if any(s < 0 for s in stal) or a.steps < 1 or a.batch < 1 or a.fields < 1 or a.zipf <= 1:
        ap.error("staleness >= 0, steps/batch/fields >= 1, zipf > 1")
    print(f"cache_bench: zipf {a.zipf} over 1e9 ids, {a.batch} samples x {a.fields} ids per step, "
          f"{a.steps} steps, {a.servers} servers, cache_rows {a.cache_rows}", flush=True)
    base = None
    for s in stal:
        pulled, kps, loss, hit = run(s, a)
        base = base or pulled
        print(f"s={s:<3} pulled/step {pulled / 1024:8.1f} KiB ({base / pulled:4.2f}x fewer)  "
              f"keys/s {kps:9.0f}  hit rate {hit:5.3f}  held-out log loss {loss:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
