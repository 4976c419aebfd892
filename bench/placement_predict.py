#!/usr/bin/env python3
"""The planner's prediction for the torchvision runs of bench/placement_netns.sh: the
model profiled at the run's input size (layerps.placement.profile), then layerps-plan for
uniform, park and the automatic pick, on the netns cluster as the cost model sees it.

The netns cluster puts the W workers behind one link of RATE and the servers (with the
suffix rank) behind the other end; the cost model gives every node its own NIC. So each
worker is given RATE / W and each server RATE / S (the link is shared that way when all
of them talk at once, as they do in a step). Compute: the W workers run their layers at
the same time, so each gets cores / W of the probe's one-thread FLOP/s; the suffix rank
(park's PS worker) runs while the workers wait for it, on one thread: the probe's
one-thread FLOP/s.

  .venv/bin/python bench/placement_predict.py --model vgg16 --rate 1gbit --workers 4 --batch 8
"""
import argparse
import json
import os
import subprocess
import tempfile

import torch


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="vgg16", choices=["vgg16", "alexnet", "resnet18", "resnet50"])
    p.add_argument("--size", type=int, default=0, help="input size (default 32; alexnet 64)")
    p.add_argument("--rate", default="1gbit", help="the link's rate (tc's notation: 100mbit, 1gbit, 10gbit)")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--servers", type=int, default=2)
    p.add_argument("--batch", type=int, default=8, help="samples per worker per step")
    p.add_argument("--cores", type=int, default=os.cpu_count())
    p.add_argument("--flops", type=float, default=0.0,
                   help="one thread's FLOP/s instead of probing (the probe varies with the VM's load)")
    p.add_argument("--fc_nodes", type=int, default=0,
                   help="also predict stanza with this many FC nodes (bench/placement_netns.sh FC_NODES)")
    p.add_argument("--cut", default=None,
                   help="park forced to cut before this parameter layer (the 'park at' row; default: the "
                   "first FC layer, where placement_cnn.py cuts: vgg16 classifier.0, alexnet classifier.1, "
                   "whose classifier.0 is a dropout); '' leaves the row out")
    args = p.parse_args()
    import torchvision
    import layerps
    from layerps.placement import probe, profile

    torch.set_num_threads(1)
    # Before the model exists: right after building VGG-16 (half a GB of fresh memory) the
    # probe read 35% low on this VM, the kernel still busy with the new pages.
    one = args.flops or float(probe()["worker_flops"])  # torch on one thread, as every rank runs
    size = args.size or (64 if args.model == "alexnet" else 32)
    model = getattr(torchvision.models, args.model)(weights=None, num_classes=10)
    prof = profile(model, torch.randn(args.batch, 3, size, size), name=args.model)
    rate = float(args.rate.lower().replace("gbit", "e9").replace("mbit", "e6"))
    flops = one * min(1.0, args.cores / args.workers)
    fd, path = tempfile.mkstemp(suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(prof, f)
    rows = []
    asks = [("uniform", "uniform", []), ("park", "park", []), ("auto", "auto", [])]
    cut = args.cut if args.cut is not None else {"vgg16": "classifier.0", "alexnet": "classifier.1"}.get(args.model)
    if cut:
        asks.insert(2, (f"park at {cut}", "park", [f"--cut={cut}"]))
    if args.fc_nodes > 0:
        asks.insert(-1, (f"stanza, {args.fc_nodes} FC node(s)", "stanza", [f"--fc_nodes={args.fc_nodes}"]))
    for asked, strategy, extra in asks:
        out = subprocess.run([layerps.tool_path("layerps-plan"), f"--model={path}", f"--workers={args.workers}",
                              f"--servers={args.servers}", f"--batch={args.batch}", f"--strategy={strategy}",
                              f"--worker_bandwidth={rate / args.workers:.6g}bit",
                              f"--server_bandwidth={rate / args.servers:.6g}bit",
                              f"--bandwidth={rate:.6g}bit", f"--worker_flops={flops:.4g}",
                              f"--server_flops={one:.4g}", "--latency=100us", "--json"] + extra,
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"placement_predict: layerps-plan ({asked}) failed: {out.stderr.strip()}")
        plan = json.loads(out.stdout)
        if "plans" in plan:
            plan = plan["plans"][plan["chosen"]] if isinstance(plan["chosen"], int) else \
                next(q for q in plan["plans"] if q["strategy"] == plan["chosen"])
        pr = plan["prediction"]
        rows.append((asked, plan["strategy"], plan.get("cut_layer") or "-", pr["step_s"], pr["worker_bytes"] / 1e6))
    os.unlink(path)
    print(f"{args.model} at {size}x{size}, W={args.workers} x batch {args.batch}, S={args.servers}, link {args.rate}; "
          f"{flops / 1e9:.2f} GFLOP/s per worker, {one / 1e9:.2f} for the suffix rank ({args.cores} cores)")
    print("| asked | strategy | cut | predicted s/step | workers' MB/step |")
    print("|---|---|---|---|---|")
    for asked, strategy, cut, step, mb in rows:
        print(f"| {asked} | {strategy} | {cut} | {step:.3f} | {mb:.1f} |")


if __name__ == "__main__":
    main()
