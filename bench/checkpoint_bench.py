#!/usr/bin/env python3
"""Cost of a checkpoint and of a restore (docs/checkpoints.md), on a local cluster of
server threads (tcp): a dense table (Adam: values + 3 state planes) and a sparse table
(Adagrad: dim values + dim state per row). Prints one line per repetition and the
median; the results page is bench/CHECKPOINT.md.

    PYTHONPATH=build/bindings/python python3 bench/checkpoint_bench.py \
        --servers 2 --dense_mib 256 --rows 1000000 --dim 64 --dir /tmp/ckpt-bench
"""

import argparse
import os
import shutil
import statistics
import sys
import time

import numpy as np

import layerps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--dense_mib", type=int, default=256, help="dense values, MiB (the file holds 4x: Adam's state)")
    ap.add_argument("--rows", type=int, default=1_000_000, help="sparse rows")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dir", default="/tmp/layerps-checkpoint-bench", help="where the sets go (removed first)")
    a = ap.parse_args()
    if a.servers < 1 or a.dense_mib < 1 or a.rows < 1 or a.dim < 1 or a.reps < 1:
        ap.error("every size must be >= 1")
    shutil.rmtree(a.dir, ignore_errors=True)
    n = a.dense_mib * (1 << 20) // 4
    opts = dict(transport="tcp", dense_chunk_elems=1 << 20, request_timeout_ms=600_000,
                checkpoint_keep=1)
    ids = np.arange(a.rows, dtype=np.int64) * 2654435761
    print(f"checkpoint_bench: {a.servers} server(s), dense {a.dense_mib} MiB (adam), "
          f"{a.rows} rows x dim {a.dim} (adagrad), {os.cpu_count()} cpu(s)", flush=True)
    writes, reads, size = [], [], 0
    for rep in range(a.reps):
        with layerps.LocalCluster(num_servers=a.servers, num_workers=1, **opts) as c:
            w = c.workers[0]
            d = w.declare_dense("dense", n, rule="adam", lr=0.001)
            s = w.declare_sparse("emb", a.dim, rule="adagrad", lr=0.1)
            w.push(d, np.ones(n, np.float32)).wait(timeout=600)
            for lo in range(0, a.rows, 100_000):
                k = ids[lo:lo + 100_000]
                w.push_sparse(s, k, np.ones((len(k), a.dim), np.float32)).wait(timeout=600)
            t0 = time.perf_counter()
            path = w.checkpoint(a.dir)
            writes.append(time.perf_counter() - t0)
            size = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
        with layerps.LocalCluster(num_servers=a.servers, num_workers=1, restore_dir=a.dir, **opts) as c:
            w = c.workers[0]
            t0 = time.perf_counter()
            w.declare_dense("dense", n, rule="adam", lr=0.001)
            w.declare_sparse("emb", a.dim, rule="adagrad", lr=0.1)
            reads.append(time.perf_counter() - t0)
        print(f"rep {rep}: {size / 2**20:.0f} MiB written in {writes[-1]:.2f} s "
              f"({size / 2**20 / writes[-1]:.0f} MiB/s), restored in {reads[-1]:.2f} s "
              f"({size / 2**20 / reads[-1]:.0f} MiB/s)", flush=True)
    w_med, r_med = statistics.median(writes), statistics.median(reads)
    print(f"median: checkpoint {w_med:.2f} s ({size / 2**20 / w_med:.0f} MiB/s), "
          f"restore {r_med:.2f} s ({size / 2**20 / r_med:.0f} MiB/s), {size / 2**20:.0f} MiB")
    shutil.rmtree(a.dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
