#!/usr/bin/env python3
"""Bounded memory under layerps-launch: 2 servers, 2 workers, 10^8 distinct ids.

Run it as the workers of a launched cluster:

    layerps-launch -s 2 -w 2 --quiet_daemons -- \\
        python3 bench/sparse_launch.py --ids 100000000 --capacity 1000000 --dim 16

Each worker streams its half of --ids ids, drawn uniformly from 2^62 ids (so nearly all
distinct), in batches of --batch: a pull of the rows, then an SGD push, as a training
step does. Worker 0 samples, every --every batches, the RSS of both servers (the
launcher's children whose LAYERPS_ROLE is server, read from /proc) and prints one line
per sample, then a summary: idle RSS (before the first push), peak RSS, and the bound
the issue asks for, 1.5 x the capacity's row bytes + idle RSS. --capacity 0: unbounded
(stop it early with --ids; it grows). --json writes the samples.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

import layerps


def server_pids():
    parent = os.getppid()
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != parent:
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        except (OSError, ValueError, IndexError):
            continue
        if env.get(b"LAYERPS_ROLE") == b"server":
            found[int(env.get(b"LAYERPS_RANK", b"-1"))] = int(pid)
    return [found[r] for r in sorted(found)]


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ids", type=int, default=10**8, help="ids streamed in all (both workers)")
    ap.add_argument("--batch", type=int, default=50000, help="ids per push (and pull)")
    ap.add_argument("--capacity", type=int, default=10**6, help="rows per server; 0: unbounded")
    ap.add_argument("--eviction", default="lru", choices=["lru", "lfu", "decayed"])
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--every", type=int, default=100, help="sample every N batches (worker 0)")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    if args.ids <= 0 or args.batch <= 0 or args.dim <= 0 or args.capacity < 0:
        ap.error("--ids, --batch and --dim must be > 0, --capacity >= 0")
    w = layerps.init()
    bounds = dict(capacity=args.capacity, eviction=args.eviction) if args.capacity else {}
    t = w.declare_sparse("ctr", args.dim, "sgd", lr=0.01, **bounds)
    pids = server_pids() if w.rank == 0 else []
    if w.rank == 0 and len(pids) != 2:
        print(f"expected 2 server processes under the launcher, found {pids}", flush=True)
        return 2
    w.barrier()
    idle = [rss_mib(p) for p in pids]
    rng = np.random.default_rng(1000 + w.rank)
    grad = np.full((args.batch, args.dim), 0.01, np.float32)
    batches = args.ids // (args.batch * w.num_workers)
    samples = []
    t0 = time.monotonic()
    for b in range(batches):
        ids = rng.integers(0, 1 << 62, args.batch, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        w.pull_sparse(t, ids).wait(timeout=120)
        w.push_sparse(t, ids, grad).wait(timeout=120)
        if w.rank == 0 and ((b + 1) % args.every == 0 or b + 1 == batches):
            rss = [rss_mib(p) for p in pids]
            streamed = (b + 1) * args.batch * w.num_workers
            samples.append(dict(ids=streamed, seconds=time.monotonic() - t0, rss_mib=rss))
            print(f"ids {streamed:>11,}  RSS MiB {rss[0]:8.1f} {rss[1]:8.1f}  "
                  f"{streamed / (time.monotonic() - t0) / 1e6:.2f} M ids/s", flush=True)
    elapsed = time.monotonic() - t0
    w.barrier()
    if w.rank == 0:
        row_mib = args.capacity * args.dim * 4 / 2**20
        peak = [max(s["rss_mib"][i] for s in samples) for i in range(2)]
        bound = [1.5 * row_mib + idle[i] for i in range(2)]
        print(f"\n{batches * args.batch * w.num_workers:,} ids in {elapsed:.0f} s "
              f"({batches * args.batch * w.num_workers / elapsed / 1e6:.2f} M ids/s, both workers)")
        print(f"idle RSS MiB {idle[0]:.1f} / {idle[1]:.1f}; peak {peak[0]:.1f} / {peak[1]:.1f}")
        if args.capacity:
            print(f"capacity rows {args.capacity:,} x dim {args.dim}: {row_mib:.1f} MiB of values; "
                  f"bound 1.5 x that + idle = {bound[0]:.1f} / {bound[1]:.1f} MiB: "
                  f"{'within' if all(p <= b for p, b in zip(peak, bound)) else 'ABOVE'}; "
                  f"(peak - idle) / row bytes = {(peak[0] - idle[0]) / row_mib:.2f} / "
                  f"{(peak[1] - idle[1]) / row_mib:.2f}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(dict(args=vars(args), idle_rss_mib=idle, peak_rss_mib=peak,
                               seconds=elapsed, samples=samples), f, indent=1)
    w.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
