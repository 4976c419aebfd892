#!/usr/bin/env python3
"""The summary of a bench/placement_interleaved.sh log: each strategy's median over the
repeats' medians (s/step, the first step of every run left out) with their spread, the
speed-up over uniform when uniform ran, measured / predicted for each strategy the
prediction table names, whether the fastest predicted of the strategies run is the fastest
measured or within 5% of it, and the same for auto's pick (layerps-plan --strategy=auto
prefers a plan without a cut unless a cut plan is predicted faster by its margin).

Usage: bench/placement_summary.py LOG   (placement_interleaved.sh appends its output to LOG)
"""
import collections
import re
import statistics
import sys

NAMES = ("uniform", "allreduce", "park", "stanza", "stanza2")


def parse(lines):
    runs = collections.defaultdict(list)  # strategy -> each run's median step
    predicted = {}  # the prediction table's rows for the strategies run here
    auto_step = None  # auto's predicted step (its pick is the row with that prediction)
    for line in lines:
        m = re.match(r"(uniform|allreduce|park|stanza2|stanza)\s+.*median ([0-9.]+) s/step", line)
        if m:
            runs[m.group(1)].append(float(m.group(2)))
        m = re.match(r"\| auto \| .* \| ([0-9.]+) \| [0-9.]+ \|$", line)
        if m:
            auto_step = float(m.group(1))
        m = re.match(r"\| (uniform|allreduce|park at \S+|stanza, 1 FC node\(s\)|stanza, 2 FC node\(s\)) \| .* \| "
                     r"([0-9.]+) \| [0-9.]+ \|$", line)
        if m:
            key = {"stanza, 1 FC node(s)": "stanza", "stanza, 2 FC node(s)": "stanza2"}.get(
                m.group(1), "park" if m.group(1).startswith("park at") else m.group(1))
            predicted[key] = float(m.group(2))
    return dict(runs), predicted, auto_step


def summary(runs, predicted, auto_step):
    out = ["# summary: median of the repeats' medians [min, max], s/step; speed-up = uniform / strategy"]
    med = {k: statistics.median(v) for k, v in runs.items() if v}
    u = med.get("uniform")
    for k in NAMES:
        if k not in med:
            continue
        v = runs[k]
        sp = f"  {u / med[k]:.2f}x uniform" if u else ""
        pr = f"  predicted {predicted[k]:.3f}, measured/predicted {med[k] / predicted[k]:.2f}" if k in predicted else ""
        out.append(f"{k:9} {med[k]:8.3f} [{min(v):.3f}, {max(v):.3f}] over {len(v)} repeats{sp}{pr}")
    both = [k for k in med if k in predicted]
    if both:
        fast_m = min(both, key=med.get)
        fast_p = min(both, key=predicted.get)
        gap = med[fast_p] / med[fast_m]
        out.append(f"fastest measured: {fast_m}; fastest predicted: {fast_p}, {gap:.2f}x the fastest measured step "
                   f"({'within' if gap <= 1.05 else 'NOT within'} 5%)")
        picked = [k for k in both if auto_step is not None and abs(predicted[k] - auto_step) < 5e-4]
        if picked:
            gap = med[picked[0]] / med[fast_m]
            out.append(f"auto picks {picked[0]} (predicted {auto_step:.3f}), {gap:.2f}x the fastest measured step "
                       f"({'within' if gap <= 1.05 else 'NOT within'} 5%)")
        elif auto_step is not None:
            out.append(f"auto's pick (predicted {auto_step:.3f}) was not run here")
    return out


def main():
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0 if len(sys.argv) == 2 else 2)
    with open(sys.argv[1]) as f:
        print("\n".join(summary(*parse(f))))


if __name__ == "__main__":
    main()
