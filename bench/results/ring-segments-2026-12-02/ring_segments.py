"""The ring all-reduce with one segment per chunk against four (collective::RingSegmentBytes),
in one build: the ring is forced (algorithm="ring") and the segment passed explicitly,
1 MiB (what the ring used before it kept four segments per chunk) against the segment
RingSegmentBytes picks for that size and W, the two alternating, `--rounds` times. W
workers of a layerps.LocalCluster over tcp://127.0.0.1 in this process; each timing is
the slowest worker's mean over back-to-back collectives after one warm-up.

    .venv/bin/python bench/results/ring-segments-2026-12-02/ring_segments.py --world 4 --rounds 3

Run on a build from before RingSegmentBytes (ee98c7f), where the ring takes the segment
given; from then on the ring cuts 1 MiB to the same as the other variant.

Prints one line per (size, segment, round) and a summary of medians.
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

import layerps

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tests", "python"))
from conftest import run_parallel  # noqa: E402  (one thread per worker)

MiB = 1 << 20
FLOOR = int(os.environ.get("RING_FLOOR_KIB", "256")) << 10  # kRingMinSegmentBytes (RING_FLOOR_KIB=64: the first version)


def ring_segment_bytes(n, world, wsize, segment_bytes):
    """collective::RingSegmentBytes (src/worker/collective_ring_allreduce.cc)."""
    chunk = (n + world - 1) // world * wsize
    if chunk >= 4 * segment_bytes:
        return segment_bytes
    return min(segment_bytes, max((chunk + 3) // 4, FLOOR))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="1,4,16", help="MiB, comma list")
    a = ap.parse_args()
    if a.world < 2:
        raise SystemExit("--world must be at least 2")
    W = a.world
    res = {}
    with layerps.LocalCluster(num_servers=1, num_workers=W, transport="tcp", heartbeat_timeout_ms=5000) as c:
        for rnd in range(a.rounds):
            for mib in (float(s) for s in a.sizes.split(",")):
                n_bytes = int(mib * MiB)
                n = n_bytes // 4
                deep = ring_segment_bytes(n, W, 4, MiB)
                for label, seg in (("1seg", MiB), ("4seg", deep)):
                    reps = max(5, min(100, (64 * MiB) // n_bytes))

                    def work(w, seg=seg, reps=reps):
                        buf = np.ones(n, np.float32)
                        w.allreduce(buf, 60, segment_bytes=seg, algorithm="ring")
                        t0 = time.perf_counter()
                        for _ in range(reps):
                            w.allreduce(buf, 60, segment_bytes=seg, algorithm="ring")
                        return (time.perf_counter() - t0) / reps

                    t = max(run_parallel(work, [(w,) for w in c.workers], timeout=600)) * 1e3
                    res.setdefault((n_bytes, label, seg), []).append(t)
                    print(f"round {rnd + 1} W={W} {n_bytes >> 10:6d} KiB {label} (segment {seg >> 10} KiB) {t:8.2f} ms", flush=True)
    print(f"\nW={W}: medians over {a.rounds} rounds (ms per all-reduce)")
    sizes = sorted({k[0] for k in res})
    for nb in sizes:
        one = [v for k, v in res.items() if k[0] == nb and k[1] == "1seg"][0]
        four_key = [k for k in res if k[0] == nb and k[1] == "4seg"][0]
        four = res[four_key]
        m1, m4 = statistics.median(one), statistics.median(four)
        print(f"  {nb >> 10:6d} KiB  1 MiB segments {m1:8.2f}  {four_key[2] >> 10} KiB segments {m4:8.2f}  ratio {m1 / m4:.2f}")


if __name__ == "__main__":
    main()
