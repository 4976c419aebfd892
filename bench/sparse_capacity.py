#!/usr/bin/env python3
"""Bounded sparse tables (docs/sparse.md) under a Zipf id stream: rows held and server RSS
with and without a capacity.

A scheduler and one worker in this process, 2 servers in their own processes (so each RSS
is one server's); the worker streams batches of ids drawn from a Zipf law over 10^9 ids
(hashed, so they spread over the servers), pushes an SGD gradient for each and pulls the
rows back, as a training step does. After every few batches it reads each server's
counters (Server.table_stats) and RSS (/proc/PID/status VmRSS).

    PYTHONPATH=build-dev/bindings/python /usr/bin/python3 bench/sparse_capacity.py \
        --batches 200 --batch 10000 --capacity 100000

Prints one line per sample and a summary per configuration (unbounded, lru, lfu,
lru + admit_after=2 by default; expiry50: expiry_steps only, no capacity); --json writes
everything.
"""

import argparse
import json
import multiprocessing as mp
import sys
import time

import numpy as np

FAST = dict(heartbeat_interval_ms=200, heartbeat_timeout_ms=5000, connect_timeout_ms=30000,
            request_timeout_ms=60000)


def rss_mib(pid="self"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def server_main(address, conn):
    """One server; answers 'stats' with (table_stats, RSS MiB) until 'stop'."""
    import layerps
    s = layerps.Server(address, start=False, **FAST)
    s.start_async()
    conn.send(("idle", rss_mib()))
    while True:
        cmd = conn.recv()
        if cmd == "stop":
            break
        conn.send((s.table_stats(), rss_mib()))
    s.stop()


def zipf_ids(rng, n, exponent, space):
    # Ranks from a Zipf law (exponent 0: uniform), folded into [0, space) and hashed (an
    # odd multiplier mod 2^64) so that hot ids are spread over the key space and the servers.
    if exponent == 0:
        r = rng.integers(0, space, n, dtype=np.uint64)
    else:
        r = rng.zipf(exponent, n).astype(np.uint64) % np.uint64(space)
    return r * np.uint64(0x9E3779B97F4A7C15)


def run(config, args):
    import layerps
    sched = layerps.Scheduler("tcp://127.0.0.1:0", num_servers=2, num_workers=1, **FAST)
    ctx = mp.get_context("spawn")
    pipes, procs = [], []
    for _ in range(2):
        a, b = ctx.Pipe()
        p = ctx.Process(target=server_main, args=(sched.address, b), daemon=True)
        p.start()
        pipes.append(a)
        procs.append(p)
    idle = [c.recv()[1] for c in pipes]
    w = layerps.Worker(sched.address, **FAST)
    kw = dict(config["bounds"])
    t = w.declare_sparse("ctr", args.dim, "sgd", lr=0.01, **kw)
    rng = np.random.default_rng(args.seed)
    grad = np.full((args.batch, args.dim), 0.01, np.float32)
    samples = []
    t0 = time.monotonic()
    pushed = 0
    for b in range(args.batches):
        ids = zipf_ids(rng, args.batch, args.zipf, args.space)
        w.pull_sparse(t, ids).wait()
        w.push_sparse(t, ids, grad).wait()
        pushed += len(ids)
        if (b + 1) % args.every == 0 or b + 1 == args.batches:
            stats = []
            for c in pipes:
                c.send("stats")
                stats.append(c.recv())
            rows = [s["ctr"]["rows_live"] for s, _ in stats]
            rss = [r for _, r in stats]
            sample = dict(batch=b + 1, ids_pushed=pushed, seconds=time.monotonic() - t0,
                          rows_live=rows, rss_mib=rss, counters=[s["ctr"] for s, _ in stats])
            samples.append(sample)
            print(f"  {config['name']:>16} batch {b + 1:5d}: rows {rows[0]:>9} {rows[1]:>9}  "
                  f"RSS MiB {rss[0]:7.1f} {rss[1]:7.1f}", flush=True)
    elapsed = time.monotonic() - t0
    for c in pipes:
        c.send("stop")
    for p in procs:
        p.join(10)
        if p.is_alive():
            p.kill()
    w.stop()
    sched.stop()
    last = samples[-1]
    return dict(name=config["name"], bounds={k: str(v) for k, v in config["bounds"].items()},
                idle_rss_mib=idle, seconds=elapsed, ids_per_s=pushed / elapsed, samples=samples,
                final_counters=last["counters"], peak_rss_mib=[max(s["rss_mib"][i] for s in samples)
                                                               for i in range(2)])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--batch", type=int, default=10000, help="ids per push (and pull)")
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--capacity", type=int, default=100000, help="rows per server")
    ap.add_argument("--zipf", type=float, default=1.1,
                    help="Zipf exponent (0: ids uniform over --space, nearly all distinct)")
    ap.add_argument("--space", type=int, default=10**9, help="id space")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--every", type=int, default=20, help="sample every N batches")
    ap.add_argument("--expiry", type=int, default=50, help="expiry_steps of config expiry50")
    ap.add_argument("--configs", default="unbounded,lru,lfu,lru+admit2",
                    help="comma list of: unbounded, lru, lfu, decayed, lru+admit2, expiry50")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    cap = args.capacity
    all_configs = {
        "unbounded": {},
        "lru": dict(capacity=cap, eviction="lru"),
        "lfu": dict(capacity=cap, eviction="lfu"),
        "decayed": dict(capacity=cap, eviction="decayed"),
        "lru+admit2": dict(capacity=cap, eviction="lru", admit_after=2),
        "expiry50": dict(expiry_steps=args.expiry),
    }
    results = []
    for name in args.configs.split(","):
        print(f"{name}: {all_configs[name]}", flush=True)
        results.append(run(dict(name=name, bounds=all_configs[name]), args))
    print()
    print(f"{'config':>12} | rows live (s0, s1) | idle RSS MiB | peak RSS MiB | evicted | refused | ids/s")
    for r in results:
        c = r["final_counters"]
        print(f"{r['name']:>12} | {c[0]['rows_live']:>8} {c[1]['rows_live']:>8} | "
              f"{r['idle_rss_mib'][0]:5.1f} {r['idle_rss_mib'][1]:5.1f} | "
              f"{r['peak_rss_mib'][0]:6.1f} {r['peak_rss_mib'][1]:6.1f} | "
              f"{c[0]['evicted'] + c[1]['evicted']:>8} | {c[0]['refused'] + c[1]['refused']:>8} | "
              f"{r['ids_per_s']:.0f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(args=vars(args), results=results), f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
