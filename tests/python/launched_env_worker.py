"""A worker started by torchrun, srun or mpirun (test_launchers.py): layerps.init() takes
its rank, size and scheduler from the launcher's environment; rank 0 hosts the scheduler
and the servers. Prints one line per worker."""
import time

import numpy as np

import layerps

t0 = time.time()
w = layerps.init()
started = time.time() - t0
env = layerps.launcher() or {"launcher": "layerps-launch", "local_rank": w.rank}
t = w.declare_dense("x", 10)
w.push(t, np.full(10, w.rank + 1, np.float32)).wait()
w.barrier()
v = w.pull(t).wait()
print(f"LAUNCHED {env['launcher']} rank {w.rank} of {w.num_workers} local {env['local_rank']}: "
      f"x[0]={v[0]:g} start {started:.3f}s", flush=True)
layerps.shutdown()
