"""Worker.allreduce by the ring and directly, in one process: W workers of a
layerps.LocalCluster over tcp://127.0.0.1, each size timed twice per algorithm (the mean of
up to 200 back-to-back collectives after one warm-up, the slowest worker's).

    PYTHONPATH=build/bindings/python /usr/bin/python3 bench/allreduce_algorithms.py W

Prints one line per (size, algorithm): the two timings in ms per collective.
"""

import os
import sys
import time

import numpy as np

import layerps

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
from conftest import run_parallel  # noqa: E402  (one thread per worker)


def main():
    if len(sys.argv) != 2 or not sys.argv[1].isdigit() or int(sys.argv[1]) < 2:
        raise SystemExit(__doc__)
    W = int(sys.argv[1])
    res = {}
    with layerps.LocalCluster(num_servers=1, num_workers=W, transport="tcp", heartbeat_timeout_ms=5000) as c:
        for n_bytes in (4 << 10, 32 << 10, 256 << 10, 1 << 20, 4 << 20):
            n = n_bytes // 4
            for _ in range(2):
                for algo in ("ring", "direct"):
                    reps = max(5, min(200, (8 << 20) // n_bytes))

                    def work(w, algo=algo, reps=reps):
                        buf = np.ones(n, np.float32)
                        w.allreduce(buf, 60, algorithm=algo)
                        t0 = time.perf_counter()
                        for _ in range(reps):
                            w.allreduce(buf, 60, algorithm=algo)
                        return (time.perf_counter() - t0) / reps

                    t = max(run_parallel(work, [(w,) for w in c.workers], timeout=600))
                    res.setdefault((n_bytes, algo), []).append(t * 1e3)
    for (nb, algo), ts in sorted(res.items()):
        print(f"W={W} {nb >> 10:6d} KiB {algo:6s} " + " ".join(f"{t:8.2f}" for t in ts) + " ms")


if __name__ == "__main__":
    main()
