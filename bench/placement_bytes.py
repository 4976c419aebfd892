"""Counted bytes per training step of the big-FC-head CNN under uniform, park and stanza,
next to what layerps-plan predicts for the same model and cluster.

    .venv/bin/python bench/placement_bytes.py [--workers 4] [--batch 32] [--steps 5]

Runs examples/python/placement_cnn.py under layerps.launch (2 servers; W data workers, plus
the suffix rank for park and stanza), reads every rank's counted traffic, profiles the same
PyTorch model (layerps.placement.profile) and asks layerps-plan for its predictions. Prints
a table; --json FILE writes it. Bytes are payload bytes moved by the W data workers per step
(table payload to and from the servers, activations and their gradients to and from the
suffix rank); headers are shown apart.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch

import layerps
from layerps.placement import profile

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "examples", "python", "placement_cnn.py")
sys.path.insert(0, os.path.dirname(EXAMPLE))
from placement_cnn import big_fc_cnn  # noqa: E402


def run(strategy, workers, args, work):
    ranks = workers + (0 if strategy == "uniform" else 1)
    out = os.path.join(work, strategy + "-{rank}.json")
    cmd = [sys.executable, "-m", "layerps.launch", "-s", "2", "-w", str(ranks), "--quiet_daemons",
           "--timeout_s=900", "--", sys.executable, EXAMPLE, "--strategy", strategy, "--epochs", "1",
           "--batch", str(args.batch * workers), "--limit", str(args.batch * workers * args.steps),
           "--lr", "0.05", "--json", out]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    if p.returncode != 0:
        raise SystemExit(f"{strategy} failed:\n{p.stdout}\n{p.stderr}")
    results = [json.load(open(out.format(rank=r))) for r in range(ranks)]
    data = results[:workers]  # the ranks that hold data (the suffix rank is the last)
    payload = sum(r["ps_payload_bytes_per_step"] + r["peer_payload_bytes_per_step"] for r in data)
    everything = sum(r["all_bytes_per_step"] for r in data)
    return payload, everything


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--batch", type=int, default=32, help="samples per worker per step")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--json")
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="layerps-placement-bytes-")
    prof = profile(big_fc_cnn(0), torch.zeros(2, 1, 32, 32), name="bigfc1")
    prof_file = os.path.join(work, "bigfc1.json")
    with open(prof_file, "w") as f:
        json.dump(prof, f)
    plan = subprocess.run([layerps.tool_path("layerps-plan"), f"--model={prof_file}", f"--workers={args.workers}",
                           "--servers=2", f"--batch={args.batch}", "--bandwidth=1Gbit", "--json"],
                          capture_output=True, text=True, timeout=120)
    if plan.returncode != 0:
        raise SystemExit(plan.stderr)
    plans = {pl["strategy"]: pl for pl in json.loads(plan.stdout)["plans"]}
    rows = []
    for strategy in ("uniform", "park", "stanza"):
        counted, everything = run(strategy, args.workers, args, work)
        predicted = plans[strategy]["prediction"]["worker_bytes"]
        rows.append(dict(strategy=strategy, counted=counted, predicted=predicted, with_headers=everything,
                         error=(counted - predicted) / predicted))
    base = rows[0]["counted"]
    print(f"bigfc (1x32x32 input), W={args.workers} data workers, b={args.batch}, 2 servers, {args.steps} steps")
    print(f"{'strategy':9} {'counted MB':>11} {'predicted MB':>13} {'error':>8} {'+headers MB':>12} {'vs uniform':>11}")
    for r in rows:
        print(f"{r['strategy']:9} {r['counted'] / 1e6:11.3f} {r['predicted'] / 1e6:13.3f} {r['error'] * 100:7.2f}% "
              f"{r['with_headers'] / 1e6:12.3f} {base / r['counted']:10.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(workers=args.workers, batch=args.batch, steps=args.steps, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
