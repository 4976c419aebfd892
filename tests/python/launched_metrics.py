"""A launched worker that scrapes every node's metrics endpoint during its job and writes
its timeline (test_observability.py). Prints one JSON line: what it found."""
import json
import os
import urllib.request

import numpy as np

import layerps

w = layerps.init()
t = w.declare_dense("m", 1000, "sum")
for _ in range(4):
    w.push(t, np.ones(1000, np.float32)).wait()
w.pull(t).wait()
w.barrier()  # every worker pushed: the servers' counters are final for this check
base = int(os.environ["LAYERPS_METRICS_PORT"]) - 1 - w.num_servers - w.rank
found = {}
if w.rank == 0:
    ports = {"scheduler": base}
    ports.update({f"server{i}": base + 1 + i for i in range(w.num_servers)})
    ports.update({f"worker{i}": base + 1 + w.num_servers + i for i in range(w.num_workers)})
    for name, port in ports.items():
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            found[name] = r.read().decode()
w.barrier()
print("METRICS " + json.dumps(found))
layerps.shutdown()
