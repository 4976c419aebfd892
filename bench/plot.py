#!/usr/bin/python3
# Copyright LayerPS authors. Licensed under Apache-2.0.
"""Draws throughput vs message size from a layerps-bench CSV.

Usage: plot.py RESULTS.csv OUT.png

One line per (system, transport, topology, op, in-flight) for the dense cases and the raw
ZeroMQ baseline (dashed), GB/s (median over repeats, min..max as an error band) against
bytes per request on a log axis. Needs matplotlib (python3-matplotlib; use /usr/bin/python3).
"""
import csv
import sys
from collections import defaultdict

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    src, out = sys.argv[1], sys.argv[2]
    lines = defaultdict(list)
    with open(src) as f:
        for row in csv.DictReader(f):
            if row["error"].strip('"') or row["gbps_median"] in ("", "0"):
                continue
            if row["system"] == "layerps" and row["mode"] != "dense":
                continue
            if row["system"] == "layerps":
                key = "LayerPS %s %sx%s %s inflight=%s" % (row["transport"], row["servers"],
                                                            row["workers"], row["op"], row["inflight"])
            else:
                key = "raw ZeroMQ %s %s%s" % (row["transport"], row["mode"],
                                              "" if row["mode"] == "oneway" else " window=" + row["inflight"])
            lines[key].append((int(row["bytes"]), float(row["gbps_median"]), float(row["gbps_min"]),
                               float(row["gbps_max"])))
    if not lines:
        sys.stderr.write("plot.py: no dense or raw rows in %s\n" % src)
        return 1
    fig, ax = plt.subplots(figsize=(8, 5), dpi=80)
    for key in sorted(lines):
        pts = sorted(lines[key])
        if len(pts) < 2:
            continue
        xs = [p[0] for p in pts]
        style = "--" if key.startswith("raw") else "-"
        ax.plot(xs, [p[1] for p in pts], style, marker="o", markersize=3, label=key, linewidth=1.2)
        ax.fill_between(xs, [p[2] for p in pts], [p[3] for p in pts], alpha=0.15)
    ax.set_xscale("log", basex=2) if matplotlib.__version__ < "3.3" else ax.set_xscale("log", base=2)
    ax.set_xlabel("bytes per request")
    ax.set_ylabel("GB/s (median over repeats)")
    ax.set_title("LayerPS push/pull vs raw ZeroMQ")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6, loc="upper left")
    fig.tight_layout()
    fig.savefig(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
