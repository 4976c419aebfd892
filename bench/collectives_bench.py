#!/usr/bin/env python3
"""LayerPS's typed collectives against torch.distributed (gloo), side by side, on one machine.

    python bench/collectives_bench.py [--worlds 2,4] [--ops allreduce,allreduce_fp16,allgather,broadcast,alltoall[,alltoallv]]
        [--min_kib 4] [--max_mib 64] [--transports ipc,tcp] [--json bench/results/collectives.json]

For each W it runs, one after the other: W torch.distributed processes with the gloo backend
(tcp://127.0.0.1), then W LayerPS worker processes under `python -m layerps.launch` per
transport (ipc: workers bind ipc://, the same-host shared-memory path; tcp: loopback). Every
process runs every op over the sizes (x4 steps; the size is each member's input): a
correctness check against a value computed here, 2 warm-up ops, then `iters` timed ops back
to back; rank 0 reports the time per op. The ops, on float32 tensors:

  allreduce       sum in place (gloo: all_reduce; LayerPS: layerps.collectives.allreduce)
  allreduce_fp16  the same sent at 2 bytes per value (gloo: cast to float16, all_reduce, cast
                  back, as Horovod's Compression.fp16; LayerPS: compression="fp16", summed in
                  float32)
  allgather       every member's tensor to every member (gloo: all_gather into W tensors)
  broadcast       rank 0's tensor to every member
  alltoall        W equal blocks, block q to member q (gloo: all_to_all_single)
  alltoallv       the same blocks with their sizes given (LayerPS: splits=, the variable-size
                  exchange with its round of lengths; gloo: all_to_all_single as above);
                  not in the default list
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

from allreduce_bench import free_port, human, sizes  # the same sweep, port and labels

MARK = "COLLECTIVES_RESULT "
OPS = ("allreduce", "allreduce_fp16", "allgather", "broadcast", "alltoall")
KNOWN_OPS = OPS + ("alltoallv",)


def iters_for(nbytes):
    return int(min(100, max(4, (128 << 20) // nbytes // 8)))


def check(op, out, rank, world, n):
    """The result of `op` on inputs x_r = r + 1 (alltoall: block q of rank r holds
    r * world + q), as every member must see it."""
    if op.startswith("allreduce"):
        ok = np.all(out == world * (world + 1) / 2)
    elif op == "allgather":
        ok = np.array_equal(out, np.repeat(np.arange(1, world + 1, dtype=np.float32), n))
    elif op == "broadcast":
        ok = np.all(out == 1)
    else:
        want = np.repeat(np.arange(world, dtype=np.float32) * world + rank, n // world)
        ok = np.array_equal(out, want)
    if not ok:
        raise SystemExit(f"rank {rank}: wrong {op} result at {n} floats: {out[:4]}")


def sweep(impl, rank, world, ops, size_list):
    """impl(op, x) -> result array; returns {op: {bytes: seconds per op}}."""
    out = {}
    for op in ops:
        out[op] = {}
        for nbytes in size_list:
            n = nbytes // 4
            if op.startswith("alltoall"):
                n -= n % world
                x = np.repeat(rank * world + np.arange(world, dtype=np.float32), n // world)
            else:
                x = np.full(n, rank + 1, np.float32)
            check(op, impl(op, x.copy()), rank, world, n)
            for _ in range(2):
                impl(op, x)
            k = iters_for(nbytes)
            t0 = time.perf_counter()
            for _ in range(k):
                impl(op, x)
            out[op][nbytes] = (time.perf_counter() - t0) / k
            if op.startswith("allreduce") or op == "broadcast":
                x[:] = rank + 1  # in place: keep the values finite
    return out


# --- one process of each kind -------------------------------------------------------------
def run_gloo(rank, world, port, ops, size_list):
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)

    def impl(op, x):
        t = torch.from_numpy(x)
        if op == "allreduce":
            dist.all_reduce(t)
            return x
        if op == "allreduce_fp16":
            h = t.half()
            dist.all_reduce(h)
            t.copy_(h)
            return x
        if op == "allgather":
            parts = [torch.empty_like(t) for _ in range(world)]
            dist.all_gather(parts, t)
            return torch.cat(parts).numpy()
        if op == "broadcast":
            dist.broadcast(t, 0)
            return x
        out = torch.empty_like(t)  # alltoall, alltoallv
        dist.all_to_all_single(out, t)
        return out.numpy()

    res = sweep(impl, rank, world, ops, size_list)
    dist.barrier()
    dist.destroy_process_group()
    return res


def run_layerps(ops, size_list):
    import layerps
    from layerps import collectives as C

    w = layerps.Worker.from_env()

    def impl(op, x):
        if op == "allreduce":
            return C.allreduce(x, op=C.Sum, worker=w)
        if op == "allreduce_fp16":
            return C.allreduce(x, op=C.Sum, compression="fp16", worker=w)
        if op == "allgather":
            return C.allgather(x, worker=w)
        if op == "broadcast":
            return C.broadcast(x, 0, worker=w)
        if op == "alltoallv":
            return C.alltoall(x, splits=[x.size // w.num_workers] * w.num_workers, worker=w)[0]
        return C.alltoall(x, worker=w)[0]

    res = sweep(impl, w.rank, w.num_workers, ops, size_list)
    rank = w.rank
    w.barrier()
    w.stop()
    return rank, res


# --- the driver ---------------------------------------------------------------------------
def collect(proc_out):
    for line in proc_out.splitlines():
        i = line.find(MARK)
        if i >= 0:
            return {op: {int(k): v for k, v in d.items()} for op, d in json.loads(line[i + len(MARK):]).items()}
    raise SystemExit("no result line in the output:\n" + proc_out[-4000:])


def common_args(args):
    return [f"--ops={args.ops}", f"--min_kib={args.min_kib}", f"--max_mib={args.max_mib}"]


def drive_gloo(world, args):
    port = free_port()
    procs = [subprocess.Popen([sys.executable, __file__, "--role=gloo", f"--rank={r}", f"--world={world}",
                               f"--port={port}"] + common_args(args),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    outs = [p.communicate(timeout=3600)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit("gloo run failed:\n" + "\n".join(o[-2000:] for o in outs))
    return collect(outs[0])


def drive_layerps(world, transport, args):
    sched = (f"ipc:///tmp/layerps-collbench-{os.getpid()}-{world}.sock" if transport == "ipc"
             else "tcp://127.0.0.1:0")
    cmd = [sys.executable, "-m", "layerps.launch", "-s", "1", "-w", str(world), f"--scheduler={sched}",
           "--quiet_daemons", "--", sys.executable, __file__, "--role=layerps"] + common_args(args)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=3600)
    if p.returncode:
        raise SystemExit(f"layerps {transport} run failed:\n" + p.stdout[-4000:])
    return collect(p.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--role", default="driver", choices=["driver", "gloo", "layerps"], help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, default=2, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--worlds", default="2,4", help="comma list of process counts (default 2,4)")
    ap.add_argument("--ops", default=",".join(OPS), help=f"comma list of {', '.join(KNOWN_OPS)}")
    ap.add_argument("--transports", default="ipc,tcp", help="LayerPS transports: ipc, tcp (default both)")
    ap.add_argument("--min_kib", type=int, default=4, help="smallest size per member, KiB (default 4)")
    ap.add_argument("--max_mib", type=int, default=64, help="largest size per member, MiB (default 64)")
    ap.add_argument("--json", default="", help="write every figure here")
    args = ap.parse_args()
    ops = [o for o in args.ops.split(",") if o]
    bad = [o for o in ops if o not in KNOWN_OPS]
    if bad:
        ap.error(f"unknown op(s) {bad}; known: {', '.join(KNOWN_OPS)}")
    size_list = sizes(args.min_kib, args.max_mib)

    if args.role == "gloo":
        res = run_gloo(args.rank, args.world, args.port, ops, size_list)
        if args.rank == 0:
            print(MARK + json.dumps(res), flush=True)
        return
    if args.role == "layerps":
        rank, res = run_layerps(ops, size_list)
        if rank == 0:
            print(MARK + json.dumps(res), flush=True)
        return

    transports = [t for t in args.transports.split(",") if t]
    rows = []
    for world in [int(w) for w in args.worlds.split(",")]:
        print(f"W = {world}: gloo ...", file=sys.stderr, flush=True)
        gloo = drive_gloo(world, args)
        ours = {}
        for t in transports:
            print(f"W = {world}: layerps {t} ...", file=sys.stderr, flush=True)
            ours[t] = drive_layerps(world, t, args)
        for op in ops:
            head = " | ".join(f"{t} us  x gloo" for t in transports)
            print(f"\nW = {world}, {op}: time per op in us; x gloo = gloo time / LayerPS time")
            print(f"{'size':>8} | {'gloo us':>9} | {head}")
            for nbytes in size_list:
                g = gloo[op][nbytes]
                cells = " | ".join(f"{ours[t][op][nbytes] * 1e6:6.0f} {g / ours[t][op][nbytes]:6.2f}"
                                   for t in transports)
                print(f"{human(nbytes):>8} | {g * 1e6:9.0f} | {cells}", flush=True)
                rows.append(dict(world=world, op=op, bytes=nbytes, gloo_s=g,
                                 **{f"layerps_{t}_s": ours[t][op][nbytes] for t in transports}))
        if args.json:  # after each W: a run cut short keeps what it measured
            with open(args.json, "w") as fh:
                json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
