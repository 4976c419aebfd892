"""A worker program for test_launch.py: run under `python -m layerps.launch`."""

import os
import sys

import numpy as np

import layerps

w = layerps.init()
assert os.environ["LAYERPS_ROLE"] == "worker"
assert w.num_workers == int(os.environ["LAYERPS_NUM_WORKERS"])
assert w.num_servers == int(os.environ["LAYERPS_NUM_SERVERS"])
n, r = w.num_workers, w.rank

t = w.declare_dense("launched/x", 300000)  # several chunks over the servers
w.push(t, np.full(300000, r + 1, np.float32)).wait(timeout=30)
w.barrier(timeout=30)
total = w.pull(t).wait(timeout=30)
assert np.all(total == n * (n + 1) / 2), total[:4]

s = w.declare_sparse("launched/e", 2, "sgd", lr=1.0)
keys = np.array([r, 100, -1], np.int64)
w.push_sparse(s, keys, np.ones((3, 2), np.float32)).wait(timeout=30)
w.barrier(timeout=30)
rows = w.pull_sparse(s, np.array([100, -1], np.int64)).wait(timeout=30)
assert np.all(rows == -n), rows

if len(sys.argv) > 1 and sys.argv[1] == "--fail" and r == n - 1:
    # Die without leaving the cluster (a clean exit would leave it, and the others would
    # finish normally): the launcher must notice the failure and stop everything.
    sys.stdout.flush()
    os._exit(3)
w.barrier(timeout=30)
print(f"launched worker rank {r} of {n}: OK", flush=True)
layerps.shutdown()
