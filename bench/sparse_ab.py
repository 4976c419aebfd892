#!/usr/bin/env python3
"""The sparse benchmarks of two builds, alternating in one run: layerps-microbench's
BM_Sparse* cases and layerps-bench --modes=sparse (or --modes=dense,sparse: every request
kind through the worker's request path), each build's run right after the other's,
repeated; prints each case's medians and their ratio (B over A).

    bench/sparse_ab.py --a=/tmp/before --b=build/bench --rounds=5

--a and --b are folders holding layerps-microbench and layerps-bench (copy a build's
bench/ folder aside before changing the code). On a shared 2-core machine single ratios
move by +-15%; compare medians over several rounds, and rerun a case that stands out."""
import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile


def micro(binary, filt):
    out = subprocess.run([binary, f"--benchmark_filter={filt}", "--benchmark_format=json"],
                         capture_output=True, text=True, check=True).stdout
    res = {}
    for x in json.loads(out)["benchmarks"]:
        scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[x["time_unit"]]
        res[x["name"]] = x["real_time"] * scale  # ms
    return res


def cluster(binary, repeats, modes):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "run.json")
        subprocess.run([binary, f"--modes={modes}", "--transports=tcp", f"--repeats={repeats}",
                        "--progress=false", f"--json={path}"], capture_output=True, check=True)
        with open(path) as f:
            rows = json.load(f)["results"]
    return {f"layerps-bench {r['label']}": r["ops_median"] for r in rows if r["system"] == "layerps"}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="folder with build A's layerps-microbench and layerps-bench")
    ap.add_argument("--b", required=True, help="the same for build B")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--filter", default="BM_Sparse(Sum|Sgd|Read|BoundedSum|ColdTier|FirstTouch)")
    ap.add_argument("--repeats", type=int, default=2, help="layerps-bench --repeats per round")
    ap.add_argument("--no_cluster", action="store_true", help="only the micro-benchmarks")
    ap.add_argument("--modes", default="sparse",
                    help="layerps-bench --modes (default sparse; dense,sparse for the request path)")
    args = ap.parse_args()
    for d in (args.a, args.b):
        for tool in ("layerps-microbench", "layerps-bench"):
            if not os.access(os.path.join(d, tool), os.X_OK):
                sys.exit(f"sparse_ab: {d}/{tool} is not executable")
    ms = collections.defaultdict(lambda: collections.defaultdict(list))
    ops = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in range(args.rounds):
        for side, d in (("a", args.a), ("b", args.b)):
            print(f"round {r + 1}/{args.rounds}: {side}", file=sys.stderr, flush=True)
            for k, v in micro(os.path.join(d, "layerps-microbench"), args.filter).items():
                ms[k][side].append(v)
            if not args.no_cluster:
                for k, v in cluster(os.path.join(d, "layerps-bench"), args.repeats, args.modes).items():
                    ops[k][side].append(v)
    print(f"{'case':48s} {'A':>10s} {'B':>10s} {'B/A':>7s}")
    for k, v in ms.items():
        a, b = statistics.median(v["a"]), statistics.median(v["b"])
        print(f"{k:48s} {a:8.3f}ms {b:8.3f}ms {b / a:7.3f}  (time)")
    for k, v in ops.items():
        a, b = statistics.median(v["a"]), statistics.median(v["b"])
        print(f"{k:48s} {a:8.1f}/s {b:8.1f}/s {b / a:7.3f}  (ops/s)")


if __name__ == "__main__":
    main()
