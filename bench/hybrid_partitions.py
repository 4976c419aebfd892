"""The partition search on the real model: examples/python/hybrid_lm.py with
--partitions auto (layerps.partition.search over real trial steps) next to an exhaustive
sweep of fixed P over the same range.

    python bench/hybrid_partitions.py [--servers 4] [--workers 4] [--steps 30] [--p_max 16]

Every run is its own layerps.launch (-s SERVERS -w WORKERS, every worker its own host).
The sweep times steps --warmup..--steps of each P; the search's pick is then looked up in
the sweep: the issue asks for it within 10% of the sweep's best.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "examples", "python", "hybrid_lm.py")


def run(args, work, label, partitions, steps):
    out = os.path.join(work, f"{label}-{{rank}}.json")
    cmd = [sys.executable, "-m", "layerps.launch", "-s", str(args.servers), "-w", str(args.workers),
           "--quiet_daemons", "--timeout_s=1200", "--", sys.executable, EXAMPLE, "--mode", "hybrid",
           "--hosts", "rank", "--steps", str(steps), "--warmup", str(args.warmup), "--partitions", str(partitions),
           "--vocab", str(args.vocab), "--dim", str(args.dim), "--batch", str(args.batch * args.workers),
           "--p_max", str(args.p_max), "--json", out]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        raise SystemExit(f"{label} failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return json.load(open(out.format(rank=0)))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--servers", type=int, default=4)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--p_max", type=int, default=16)
    p.add_argument("--vocab", type=int, default=20000)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--batch", type=int, default=128, help="per worker")
    p.add_argument("--json")
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="layerps-hybrid-partitions-")
    searched = run(args, work, "search", "auto", args.steps + 20)
    pick = searched["partition_search"]["pick"]
    history = searched["partition_search"]["history"]
    print(f"search: P = {pick}; tried (P, s/step): {[(q, round(t * 1e3, 1)) for q, t in history]}", flush=True)
    sweep = {}
    for P in range(1, args.p_max + 1):
        r = run(args, work, f"P{P}", P, args.steps)
        sweep[P] = r["seconds_per_step"]
        print(f"P = {P:2}: {sweep[P] * 1e3:7.1f} ms/step", flush=True)
    best = min(sweep, key=sweep.get)
    ratio = sweep[pick] / sweep[best]
    print(f"the search's P = {pick}: {sweep[pick] * 1e3:.1f} ms/step in the sweep; the sweep's best P = {best}: "
          f"{sweep[best] * 1e3:.1f} ms/step; ratio {ratio:.3f} ({'within' if ratio <= 1.1 else 'NOT within'} 10%)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(args=vars(args), pick=pick, history=history, sweep=sweep, best=best, ratio=ratio), f,
                      indent=1)


if __name__ == "__main__":
    main()
