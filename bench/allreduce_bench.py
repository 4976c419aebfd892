#!/usr/bin/env python3
"""LayerPS Worker.allreduce against torch.distributed (gloo), side by side, on one machine.

    python bench/allreduce_bench.py [--worlds 2,4] [--min_kib 4] [--max_mib 64] \
        [--segment_bytes N] [--json bench/results/allreduce.json]

For each W it runs, one after the other: W torch.distributed processes with the gloo
backend (tcp://127.0.0.1), then W LayerPS worker processes under `python -m layerps.launch`
with the scheduler on ipc:// (workers bind ipc://: the shared-memory path), then the same
over tcp://127.0.0.1. Every process runs the same sweep: sizes 4 KiB..64 MiB (x4 steps),
a correctness check (an all-reduce of rank+1 must give W(W+1)/2 everywhere), 2 warm-up
ops, then `iters` timed ops back to back (zeros, so values stay finite); rank 0 reports
the loop's time per op. Bus bandwidth = 2(W-1)/W * bytes / time (nccl-tests' busbw).
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import time

import numpy as np

MARK = "ALLREDUCE_RESULT "


def sizes(min_kib, max_mib):
    s, out = min_kib * 1024, []
    while s <= max_mib * 1024 * 1024:
        out.append(s)
        s *= 4
    return out


def iters_for(nbytes):
    return int(min(200, max(5, (256 << 20) // nbytes // 8)))


def sweep(allreduce, rank, world, size_list):
    """Runs the sweep with allreduce(np.ndarray) in place; returns {bytes: seconds per op}."""
    out = {}
    for nbytes in size_list:
        n = nbytes // 4
        x = np.full(n, rank + 1, np.float32)
        allreduce(x)
        want = world * (world + 1) / 2
        if not np.all(x == want):
            raise SystemExit(f"rank {rank}: wrong sum at {nbytes} bytes: {x[:4]} != {want}")
        x[:] = 0
        for _ in range(2):
            allreduce(x)
        k = iters_for(nbytes)
        t0 = time.perf_counter()
        for _ in range(k):
            allreduce(x)
        out[nbytes] = (time.perf_counter() - t0) / k
    return out


# --- one process of each kind -------------------------------------------------------------
def run_gloo(rank, world, port, size_list):
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)

    def ar(x):
        dist.all_reduce(torch.from_numpy(x))

    res = sweep(ar, rank, world, size_list)
    dist.barrier()
    dist.destroy_process_group()
    return res


def run_layerps(size_list, segment_bytes):
    import layerps

    w = layerps.Worker.from_env()

    def ar(x):
        w.allreduce(x, segment_bytes=segment_bytes)

    res = sweep(ar, w.rank, w.num_workers, size_list)
    rank = w.rank
    w.barrier()
    w.stop()
    return rank, res


# --- the driver ---------------------------------------------------------------------------
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def collect(proc_out):
    for line in proc_out.splitlines():
        i = line.find(MARK)
        if i >= 0:
            return {int(k): v for k, v in json.loads(line[i + len(MARK):]).items()}
    raise SystemExit("no result line in the output:\n" + proc_out[-4000:])


def drive_gloo(world, args):
    port = free_port()
    procs = [subprocess.Popen([sys.executable, __file__, "--role=gloo", f"--rank={r}",
                               f"--world={world}", f"--port={port}", f"--min_kib={args.min_kib}",
                               f"--max_mib={args.max_mib}"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    outs = [p.communicate(timeout=1800)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit("gloo run failed:\n" + "\n".join(o[-2000:] for o in outs))
    return collect(outs[0])


def drive_layerps(world, transport, args):
    if transport == "ipc":
        sched = f"ipc:///tmp/layerps-arbench-{os.getpid()}-{world}.sock"
    else:
        sched = "tcp://127.0.0.1:0"
    cmd = [sys.executable, "-m", "layerps.launch", "-s", "1", "-w", str(world),
           f"--scheduler={sched}", "--quiet_daemons", "--", sys.executable, __file__,
           "--role=layerps", f"--min_kib={args.min_kib}", f"--max_mib={args.max_mib}",
           f"--segment_bytes={args.segment_bytes}"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=1800)
    if p.returncode:
        raise SystemExit(f"layerps {transport} run failed:\n" + p.stdout[-4000:])
    return collect(p.stdout)


def human(nbytes):
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", default="driver", choices=["driver", "gloo", "layerps"])
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--min_kib", type=int, default=4)
    ap.add_argument("--max_mib", type=int, default=64)
    ap.add_argument("--segment_bytes", type=int, default=1 << 20)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    size_list = sizes(args.min_kib, args.max_mib)

    if args.role == "gloo":
        res = run_gloo(args.rank, args.world, args.port, size_list)
        if args.rank == 0:
            print(MARK + json.dumps(res), flush=True)
        return
    if args.role == "layerps":
        rank, res = run_layerps(size_list, args.segment_bytes)
        if rank == 0:
            print(MARK + json.dumps(res), flush=True)
        return

    all_rows = []
    for world in [int(w) for w in args.worlds.split(",")]:
        gloo = drive_gloo(world, args)
        ipc = drive_layerps(world, "ipc", args)
        tcp = drive_layerps(world, "tcp", args)
        f = 2.0 * (world - 1) / world
        print(f"\nW = {world} (segment_bytes = {args.segment_bytes}); time per op in us, "
              f"bus bandwidth in GB/s")
        print(f"{'size':>8} | {'gloo us':>9} {'GB/s':>6} | {'ipc us':>9} {'GB/s':>6} {'x gloo':>6} |"
              f" {'tcp us':>9} {'GB/s':>6} {'x gloo':>6}")
        for nbytes in size_list:
            g, i, t = gloo[nbytes], ipc[nbytes], tcp[nbytes]
            bw = lambda s: f * nbytes / s / 1e9  # noqa: E731
            print(f"{human(nbytes):>8} | {g * 1e6:9.0f} {bw(g):6.2f} | {i * 1e6:9.0f} {bw(i):6.2f} "
                  f"{g / i:6.2f} | {t * 1e6:9.0f} {bw(t):6.2f} {g / t:6.2f}", flush=True)
            all_rows.append(dict(world=world, bytes=nbytes, gloo_s=g, layerps_ipc_s=i,
                                 layerps_tcp_s=t, segment_bytes=args.segment_bytes))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(all_rows, fh, indent=1)


if __name__ == "__main__":
    main()
