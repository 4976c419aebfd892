"""A worker under layerps-launch that SIGKILLs server rank 1 (a child of the launcher,
its parent) in the middle of training, then trains on. Rule sum with integer gradients:
the values at the end are exact. --expect=replication: every push counts; --expect=
replacement: rank 1's ranges go back to the checkpoint taken before the kill;
--expect=scheduler: the scheduler is killed instead (the launcher starts a new one, which
takes the cluster over), every push counts and a barrier after it completes."""

import argparse
import os
import signal
import sys

import numpy as np

import layerps

SIZE = 4000


def server_pid(rank, role=b"server"):
    """The launcher's child that is server `rank` (by its environment; the scheduler when
    role is b"scheduler")."""
    parent = os.getppid()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != parent:
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        except (OSError, ValueError, IndexError):
            continue
        if env.get(b"LAYERPS_ROLE") == role and (role == b"scheduler" or
                                                 env.get(b"LAYERPS_RANK") == str(rank).encode()):
            return int(pid)
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--expect", choices=["replication", "replacement", "scheduler"], required=True)
    args = ap.parse_args()
    w = layerps.init()
    d = w.declare_dense("d", SIZE)
    rng = np.random.default_rng(7)
    total = np.zeros(SIZE, np.float64)
    for _ in range(5):
        g = rng.integers(-4, 5, SIZE).astype(np.float32)
        total += g
        w.push(d, g).wait(timeout=60)
    at_ckpt = total.copy()
    if args.expect == "replacement":
        w.checkpoint()  # the scheduler's checkpoint_dir
        g = rng.integers(1, 5, SIZE).astype(np.float32)  # lost on rank 1's ranges
        total += g
        w.push(d, g).wait(timeout=60)
    pid = server_pid(1, b"scheduler" if args.expect == "scheduler" else b"server")
    if pid is None:
        print("server 1 (or the scheduler) not found", flush=True)
        return 4
    os.kill(pid, signal.SIGKILL)
    after = np.zeros(SIZE, np.float64)
    for _ in range(5):
        g = rng.integers(-4, 5, SIZE).astype(np.float32)
        total += g
        after += g
        w.push(d, g).wait(timeout=60)  # waits for the takeover or the replacement
    if args.expect == "scheduler":
        w.barrier("workers", timeout=60)  # needs the new scheduler
    got = w.pull(d).wait(timeout=60).astype(np.float64)
    if args.expect in ("replication", "scheduler"):
        ok = np.array_equal(got, total)
    else:
        # Every element is either on the surviving server (every push) or on the
        # replacement (the checkpoint, then the pushes since the kill).
        ok = all(g in (t, c + a) for g, t, c, a in zip(got, total, at_ckpt, after)) and \
            not np.array_equal(got, total)
    print(f"launched {args.expect}: {'OK' if ok else 'WRONG VALUES'}; resent {w.stats()['resent']}",
          flush=True)
    w.stop()
    return 0 if ok else 5


if __name__ == "__main__":
    sys.exit(main())
