#!/usr/bin/env python3
"""The collectives of two builds of the Python package, alternating in one run: each
round runs bench/collectives_bench.py with build A's interpreter, then build B's (each a
venv with its own layerps), and the medians of the time per op of each (op, W, size) are
compared (B over A: below 1, B is faster). gloo runs in both halves: its own ratio says
how much the machine moved between them.

    python3 bench/collectives_ab.py --a /work/old/.venv/bin/python --b .venv/bin/python \\
        --rounds 3 --out bench/results/collectives-ab-DATE

Raw output: every run's JSON (collectives_bench.py --json) and the table, under --out."""
import argparse
import collections
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="build A's python (a venv with its layerps)")
    ap.add_argument("--b", required=True, help="build B's python")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--ops", default="allreduce,allgather,broadcast,alltoall")
    ap.add_argument("--transport", default="tcp")
    ap.add_argument("--min_kib", type=int, default=4)
    ap.add_argument("--max_mib", type=int, default=4)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    times = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in range(args.rounds):
        order = (("a", args.a), ("b", args.b)) if r % 2 == 0 else (("b", args.b), ("a", args.a))
        for side, py in order:
            path = os.path.join(args.out, f"r{r}-{side}.json")
            print(f"round {r + 1}/{args.rounds}: {side} ({py})", file=sys.stderr, flush=True)
            subprocess.run([py, os.path.join(HERE, "collectives_bench.py"), f"--worlds={args.worlds}",
                            f"--ops={args.ops}", f"--transports={args.transport}",
                            f"--min_kib={args.min_kib}", f"--max_mib={args.max_mib}", f"--json={path}"],
                           check=True, stdout=subprocess.DEVNULL)
            for row in json.load(open(path)):
                key = (row["op"], row["world"], row["bytes"])
                times[key][side].append(row[f"layerps_{args.transport}_s"])
                times[key]["gloo_" + side].append(row["gloo_s"])
    lines = [f"# {' '.join(sys.argv)}", f"# {os.cpu_count()} cores", "",
             "| op | W | bytes | A us (median) | B us (median) | B/A | gloo B/A |", "|---|---|---|---|---|---|---|"]
    ratios = []
    for (op, world, nbytes), v in sorted(times.items()):
        a, b = statistics.median(v["a"]), statistics.median(v["b"])
        ga, gb = statistics.median(v["gloo_a"]), statistics.median(v["gloo_b"])
        ratios.append(b / a)
        lines.append(f"| {op} | {world} | {nbytes} | {a * 1e6:.0f} | {b * 1e6:.0f} | {b / a:.3f} | {gb / ga:.3f} |")
    lines.append("")
    lines.append(f"B/A over all {len(ratios)} cases: median {statistics.median(ratios):.3f}, "
                 f"min {min(ratios):.3f}, max {max(ratios):.3f}")
    text = "\n".join(lines)
    print(text)
    open(os.path.join(args.out, "table.md"), "w").write(text + "\n")


if __name__ == "__main__":
    main()
