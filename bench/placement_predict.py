#!/usr/bin/env python3
"""The planner's prediction for the torchvision runs of bench/placement_netns.sh: the
model profiled at the run's input size with its layers timed (layerps.placement.profile,
time_layers=True: forward + backward per layer on one thread, and that thread's FLOP/s),
then layerps-plan for uniform, park, stanza and the automatic pick, on the netns cluster
as the cost model sees it.

The netns cluster puts the W workers on one host and the servers, with the suffix ranks,
on another, joined by one link of RATE each way: every node's NIC is given RATE, and
each side's nodes share one link of RATE (--worker_link, --server_link), so in each
phase of a step (pull, activations, their gradients, all-reduce, push) a side's bytes add
up on it. The suffix ranks' all-reduce stays on the server host: --server_loopback, the
rate of a 2-rank Worker.allreduce over TCP on 127.0.0.1, measured here (or given); the
workers' ring all-reduce (allreduce) stays on the worker host: --worker_loopback, by
default the same rate (both hosts are this machine).
Compute: the W workers run their layers at the same time, so each gets cores / W of the
profiling thread's FLOP/s; a suffix rank runs while the workers wait for it, on one
thread (the profiling thread's FLOP/s).

  .venv/bin/python bench/placement_predict.py --model vgg16 --rate 1gbit --workers 4 --batch 8

--save_profile FILE keeps what was measured (the timed profile and the loopback rate);
--profile FILE predicts from such a file without measuring again (another model version,
other flags), so a prediction can be recomputed for a run long after it.
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
    p.add_argument("--cores", type=int, default=0, help="cores the workers share (default: this machine's, "
                   "or the --profile file's)")
    p.add_argument("--server_loopback", default="",
                   help="the server host's loopback rate for the FC nodes' all-reduce (layerps-plan's "
                   "notation: 40Gbit, 4.5e10bit); "
                   "default: measured")
    p.add_argument("--worker_loopback", default="",
                   help="the worker host's loopback rate for the workers' ring all-reduce (the same "
                   "notation; none: the ring crosses the workers' NICs, as the model had it before "
                   "2026-12-02's night); default: --server_loopback's")
    p.add_argument("--save_profile", help="write the measured profile and loopback rate here (JSON)")
    p.add_argument("--profile", help="predict from this --save_profile file instead of measuring")
    p.add_argument("--role", default="", help=argparse.SUPPRESS)
    p.add_argument("--fc_nodes", type=int, default=0,
                   help="also predict stanza with this many FC nodes (bench/placement_netns.sh FC_NODES)")
    p.add_argument("--cut", default=None,
                   help="park forced to cut before this parameter layer (the 'park at' row; default: the "
                   "first FC layer, where placement_cnn.py cuts: vgg16 classifier.0, alexnet classifier.1, "
                   "whose classifier.0 is a dropout); '' leaves the row out")
    args = p.parse_args()
    if args.role == "loopback":
        return measure_loopback()
    import torchvision
    import layerps
    from layerps.placement import profile

    size = args.size or (64 if args.model == "alexnet" else 32)
    if args.profile:
        with open(args.profile) as f:
            saved = json.load(f)
        if (saved["model"], saved["size"], saved["batch"]) != (args.model, size, args.batch):
            raise SystemExit(f"placement_predict: {args.profile} is {saved['model']} at {saved['size']}, batch "
                             f"{saved['batch']}; asked {args.model} at {size}, batch {args.batch}")
        prof, loopback = saved["profile"], args.server_loopback or saved["loopback"]
        args.cores = args.cores or saved["cores"]
    else:
        loopback = args.server_loopback or loopback_rate()
        torch.set_num_threads(1)
        model = getattr(torchvision.models, args.model)(weights=None, num_classes=10)
        prof = profile(model, torch.randn(args.batch, 3, size, size), name=args.model, time_layers=True)
    if args.save_profile:
        with open(args.save_profile, "w") as f:
            json.dump(dict(model=args.model, size=size, batch=args.batch, loopback=loopback,
                           cores=args.cores or os.cpu_count(), profile=prof), f)
    args.cores = args.cores or os.cpu_count()
    worker_loopback = args.worker_loopback or loopback
    one = prof["reference_flops"]  # the thread that timed the layers, as every rank runs
    rate = float(args.rate.lower().replace("gbit", "e9").replace("mbit", "e6"))
    flops = one * min(1.0, args.cores / args.workers)
    fd, path = tempfile.mkstemp(suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(prof, f)
    rows = []
    asks = [("uniform", "uniform", []), ("park", "park", []), ("allreduce", "allreduce", []), ("auto", "auto", [])]
    cut = args.cut if args.cut is not None else {"vgg16": "classifier.0", "alexnet": "classifier.1"}.get(args.model)
    if cut:
        asks.insert(2, (f"park at {cut}", "park", [f"--cut={cut}"]))
    for n in sorted({1, args.fc_nodes} - {0}):
        asks.insert(-1, (f"stanza, {n} FC node(s)", "stanza", [f"--fc_nodes={n}"]))
    for asked, strategy, extra in asks:
        out = subprocess.run([layerps.tool_path("layerps-plan"), f"--model={path}", f"--workers={args.workers}",
                              f"--servers={args.servers}", f"--batch={args.batch}", f"--strategy={strategy}",
                              f"--bandwidth={rate:.6g}bit", f"--worker_link={rate:.6g}bit",
                              f"--server_link={rate:.6g}bit", f"--server_loopback={loopback}",
                              f"--worker_flops={flops:.4g}",
                              f"--server_flops={one:.4g}", f"--worker_loopback={worker_loopback}",
                              "--latency=100us", "--json"] + extra,
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
          f"measured layer times; {flops / 1e9:.2f} GFLOP/s per worker, {one / 1e9:.2f} for a suffix rank "
          f"({args.cores} cores); server loopback {loopback}, worker loopback {worker_loopback}"
          + (f" (profile from {args.profile})" if args.profile else ""))
    print("| asked | strategy | cut | predicted s/step | workers' MB/step |")
    print("|---|---|---|---|---|")
    for asked, strategy, cut, step, mb in rows:
        print(f"| {asked} | {strategy} | {cut} | {step:.3f} | {mb:.1f} |")
    executed = [r for r in rows if r[0] in ("uniform", "allreduce") or r[0].startswith("park at") or r[0].startswith("stanza")]
    best = min(executed, key=lambda r: r[3])
    print(f"fastest predicted of the rows bench/placement_netns.sh runs: {best[0]} ({best[3]:.3f} s/step)")


LOOPBACK_MARK = "LOOPBACK_RESULT "


def loopback_rate():
    """Bits per second a 2-rank Worker.allreduce of 64 MiB moves over TCP on 127.0.0.1,
    counted as 2 (W - 1) x its bytes (what the cost model puts on the loopback), best of
    three; in tc's notation."""
    import subprocess
    import sys
    env = dict(os.environ, LAYERPS_BIND="tcp://127.0.0.1:0", GLOG_minloglevel="2")
    out = subprocess.run([sys.executable, "-m", "layerps.launch", "-s", "1", "-w", "2",
                          "--scheduler=tcp://127.0.0.1:0", "--quiet_daemons", "-t", "300", "--",
                          sys.executable, os.path.abspath(__file__), "--role=loopback"],
                         capture_output=True, text=True, env=env, timeout=360)
    for line in out.stdout.splitlines():
        if LOOPBACK_MARK in line:
            return line.split(LOOPBACK_MARK, 1)[1].strip()
    raise SystemExit(f"placement_predict: the loopback measurement failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")


def measure_loopback():
    import time
    import layerps
    from layerps import collectives as C
    torch.set_num_threads(1)
    w = layerps.init()
    x = torch.zeros(16 << 20)
    C.allreduce(x, worker=w)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        C.allreduce(x, worker=w)
        best = min(best, time.perf_counter() - t0)
    if w.rank == 0:
        print(f"{LOOPBACK_MARK}{2 * x.numel() * 4 * 8 / best:.4g}bit", flush=True)
    layerps.shutdown()


if __name__ == "__main__":
    main()
