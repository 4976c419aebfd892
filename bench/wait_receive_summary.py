#!/usr/bin/env python3
"""Medians of bench/wait_receive_ab.sh's summary.txt: per variant and case, LayerPS ops/s,
p50 latency and the ratio to raw ZeroMQ (where the case has one), over all rounds.
Usage: python3 bench/wait_receive_summary.py OUT/summary.txt"""
import statistics
import sys

if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
    print(__doc__)
    sys.exit(0 if len(sys.argv) == 2 else 2)
rows = {}
variant = None
for line in open(sys.argv[1]):
    if line.startswith("== ") and "round" not in line:
        variant = line.split()[1]
    elif line.startswith("layerps "):
        f = line.split()
        case = " ".join(f[1:7])
        ops, p50, vs = float(f[11]), float(f[13]), f[15]
        rows.setdefault((case, variant), []).append((ops, p50, None if vs == "-" else float(vs)))
order = ["old", "new-cb", "new-off", "new"]
print(f"{'case':44s} {'variant':8s} {'n':>2s} {'ops/s':>8s} {'p50 us':>7s} {'vs raw':>7s}  ratios to raw")
for case in sorted({c for c, _ in rows}):
    for v in order:
        xs = rows.get((case, v))
        if not xs:
            continue
        ratios = [x[2] for x in xs if x[2] is not None]
        med = f"{statistics.median(ratios):.2f}" if ratios else "-"
        print(f"{case:44s} {v:8s} {len(xs):2d} {statistics.median(x[0] for x in xs):8.0f} "
              f"{statistics.median(x[1] for x in xs):7.1f} {med:>7s}  {ratios if ratios else ''}")
