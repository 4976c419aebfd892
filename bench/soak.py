#!/usr/bin/env python3
"""Soak: a cluster of real daemons trains for a long time while faults are injected,
and the memory (RSS) of every process is recorded.

A layerps-scheduler (replace_servers_ms, tolerate_worker_loss, periodic checkpoints),
--servers layerps-server processes (2) and 2 worker processes (this script with --worker: an
asynchronous dense + sparse training loop) run for --seconds. Every --fault_every
seconds a fault is injected, alternately:
  - server rank 1 is SIGKILLed and a replacement (layerps-server --rank=1
    --restore=<checkpoint dir>) is started once the scheduler declared it dead;
  - worker rank 1 is SIGKILLed and a new worker process started, which takes its rank.
Server rank 0, worker rank 0 and the scheduler live the whole run: their RSS is the
leak indicator. RSS of every live process is sampled every --sample_s seconds into
<out>/rss.csv; the summary (printed, and <out>/summary.md) gives per process its RSS
after warm-up, at the end and at most, the faults injected and the steps trained.
Every worker step checks its pulls are finite; a worker that fails exits non-zero and
the soak reports it (docs: bench/SOAK.md).

--exact (the short soak CI runs, tests/python/test_soak.py): the scheduler runs with
--replication instead of checkpoints, and every value is known. Each worker step adds 1 to
every element of a dense 'sum' table and to its own rows of a sparse 'sum' table, and
records each push once it is acknowledged. The faults, in turn: worker rank 1 SIGKILLed and
restarted (its successor takes its rank and its rows); server rank 1 SIGKILLed (its backup
takes its ranges over, no replacement); the scheduler SIGKILLed and started again on its
address (every node runs with --scheduler_recovery_ms: the new scheduler takes the
running cluster over, docs/recovery.md); with --servers=3 or more, server rank 2 (its
backup takes over, after the servers copied their ranges to their new backups); worker
rank 1 again; then the worker and the scheduler in turn. At the end every worker
flushes and meets the others, and worker rank 0 pulls both tables and checks them against
the acknowledged pushes: an element must equal their count, or exceed it by at most the
pushes that were in flight when a worker was killed (never less: nothing acknowledged may
be lost). The RSS of the scheduler, server rank 0 and worker rank 0 must stay within
--rss_slack_mib of its value after warm-up.

  PYTHONPATH=build/bindings/python python3 bench/soak.py --seconds 1800 --out /tmp/soak
  .venv/bin/python bench/soak.py --exact --seconds 120 --fault_every 30 --warmup_s 20 --out /tmp/short
"""

import argparse
import os
import signal
import subprocess
import sys
import time

HB = ["--heartbeat_interval_ms=200", "--heartbeat_timeout_ms=2000"]
RECOVERY_MS = 60000  # --exact: how long the nodes wait for a restarted scheduler


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def worker_main(args):
    import numpy as np
    import layerps

    w = layerps.Worker(args.scheduler, heartbeat_interval_ms=200, heartbeat_timeout_ms=2000,
                       connect_timeout_ms=60000, request_timeout_ms=120000)
    d = w.declare_dense("dense", args.dense, rule="sgd", lr=0.001)
    # Bounded (LRU): the ids never stop coming, so an unbounded table would grow for ever
    # and hide a leak.
    s = w.declare_sparse("emb", 16, rule="adagrad", lr=0.01, capacity=args.capacity)
    rng = np.random.default_rng(w.rank * 7919 + int(time.time()))
    steps = 0
    counter = os.path.join(args.out, f"steps-worker{w.rank}-{os.getpid()}")
    last = time.time()
    while not os.path.exists(os.path.join(args.out, "stop")):
        ids = (rng.zipf(1.1, args.batch) % (1 << 40)).astype(np.int64)
        vals = w.pull(d).wait(timeout=180)
        rows = w.pull_sparse(s, ids).wait(timeout=180)
        if not (np.isfinite(vals).all() and np.isfinite(rows).all()):
            print("non-finite values pulled", flush=True)
            sys.exit(3)
        w.push(d, (rng.standard_normal(args.dense) * 0.01).astype(np.float32)).wait(timeout=180)
        w.push_sparse(s, ids, (rng.standard_normal((len(ids), 16)) * 0.01).astype(np.float32)).wait(timeout=180)
        steps += 1
        if args.step_sleep_s > 0:
            time.sleep(args.step_sleep_s)
        if time.time() - last > 5:
            with open(counter, "w") as f:
                f.write(str(steps))
            last = time.time()
    with open(counter, "w") as f:
        f.write(str(steps))
    w.stop()


def exact_worker_main(args):
    """--exact: known increments, acknowledged pushes counted (see the top)."""
    import numpy as np
    import layerps

    w = layerps.Worker(args.scheduler, heartbeat_interval_ms=200, heartbeat_timeout_ms=2000,
                       connect_timeout_ms=60000, request_timeout_ms=60000,
                       scheduler_recovery_ms=RECOVERY_MS)
    d = w.declare_dense("dense", args.dense, rule="sum")
    s = w.declare_sparse("rows", 4, rule="sum")
    ids = (np.arange(args.batch, dtype=np.int64) * 1009 + (w.rank << 32))  # this rank's rows
    ones_d = np.ones(args.dense, np.float32)
    ones_s = np.ones((args.batch, 4), np.float32)
    acked = {"dense": 0, "rows": 0}
    path = os.path.join(args.out, f"acked-rank{w.rank}-{os.getpid()}")

    def record():
        with open(path + ".tmp", "w") as f:
            f.write(f"{acked['dense']} {acked['rows']}")
        os.replace(path + ".tmp", path)

    record()
    stop = os.path.join(args.out, "stop")
    while not os.path.exists(stop):
        w.push(d, ones_d).wait(timeout=120)
        acked["dense"] += 1
        record()
        w.push_sparse(s, ids, ones_s).wait(timeout=120)
        acked["rows"] += 1
        record()
        if args.step_sleep_s > 0:
            time.sleep(args.step_sleep_s)
    w.flush(timeout=120)
    w.barrier("workers", timeout=300)  # every worker's pushes are applied
    if w.rank == 0:
        # The acknowledged pushes of every incarnation of every rank, and how many
        # incarnations were killed (each may have had one push of each table in flight).
        done = {}
        for f in os.listdir(args.out):
            if f.startswith("acked-rank") and not f.endswith(".tmp"):
                rank = int(f[len("acked-rank"):].split("-")[0])
                dense, rows = (int(x) for x in open(os.path.join(args.out, f)).read().split())
                done.setdefault(rank, []).append((dense, rows))
        killed = int(open(os.path.join(args.out, "killed")).read()) if os.path.exists(
            os.path.join(args.out, "killed")) else 0
        want_dense = sum(x for v in done.values() for x, _ in v)
        got = w.pull(d).wait(timeout=120)
        problems = []
        if not (got.min() >= want_dense and got.max() <= want_dense + killed):
            problems.append(f"dense: elements in [{got.min()}, {got.max()}], acknowledged {want_dense}, "
                            f"in flight at kills at most {killed}")
        for rank, incarnations in sorted(done.items()):
            rids = (np.arange(args.batch, dtype=np.int64) * 1009 + (rank << 32))
            rows = w.pull_sparse(s, rids).wait(timeout=120)
            want = sum(r for _, r in incarnations)
            if not (rows.min() >= want and rows.max() <= want + killed):
                problems.append(f"rows of rank {rank}: in [{rows.min()}, {rows.max()}], acknowledged {want}")
        verdict = "EXACT OK" if not problems else "EXACT FAILED: " + "; ".join(problems)
        verdict += f" (dense {got[0]:.0f} = {want_dense} acknowledged pushes of {len(done)} ranks)"
        open(os.path.join(args.out, "verdict"), "w").write(verdict)
        print(verdict, flush=True)
    w.barrier("workers", timeout=300)
    w.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=1800, help="how long to train (default 1800)")
    ap.add_argument("--fault_every", type=float, default=120, help="seconds between faults (default 120)")
    ap.add_argument("--checkpoint_every_s", type=int, default=30,
                    help="the scheduler's periodic checkpoints (default 30)")
    ap.add_argument("--sample_s", type=float, default=5, help="RSS sampling period (default 5)")
    ap.add_argument("--warmup_s", type=float, default=60, help="RSS reference taken after this (default 60)")
    ap.add_argument("--dense", type=int, default=1 << 20, help="dense table elements (default 2^20)")
    ap.add_argument("--capacity", type=int, default=200000,
                    help="sparse rows per server at most (LRU; default 200000)")
    ap.add_argument("--step_sleep_s", type=float, default=0,
                    help="workers pause this long after each step (default 0: as fast as they can)")
    ap.add_argument("--batch", type=int, default=4096, help="sparse ids per step (default 4096)")
    ap.add_argument("--servers", type=int, default=2,
                    help="server processes (default 2); --exact kills every rank but 0 in turn")
    ap.add_argument("--out", required=True, help="directory for logs, checkpoints, rss.csv, summary.md")
    ap.add_argument("--exact", action="store_true",
                    help="replication instead of checkpoints, known increments checked at the end, "
                         "RSS bounded (the short soak of CI; see the top)")
    ap.add_argument("--rss_slack_mib", type=float, default=24,
                    help="--exact: how far the long-lived processes' RSS may rise after warm-up (default 24)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--scheduler", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return exact_worker_main(args) if args.exact else worker_main(args)
    if args.servers < 2:
        ap.error("--servers must be 2 or more")
    if args.seconds <= 0 or args.fault_every <= 0 or args.sample_s <= 0:
        ap.error("--seconds, --fault_every and --sample_s must be > 0")
    if not args.exact and (args.checkpoint_every_s < 1 or args.fault_every < args.checkpoint_every_s + 5):
        ap.error("--fault_every must exceed --checkpoint_every_s by 5 s or more: a replacement "
                 "restores from the last checkpoint set")

    import layerps

    os.makedirs(args.out, exist_ok=True)
    for f in os.listdir(args.out):
        if f in ("stop", "killed", "verdict") or f.startswith("steps-") or f.startswith("acked-"):
            os.remove(os.path.join(args.out, f))
    ckpt = os.path.join(args.out, "ckpt")
    subprocess.run(["rm", "-rf", ckpt, os.path.join(args.out, "logs")], check=True)
    logs = os.path.join(args.out, "logs")
    os.makedirs(logs, exist_ok=True)
    nlog = [0]

    def spawn(name, argv):
        nlog[0] += 1
        log = open(os.path.join(logs, f"{nlog[0]:03d}-{name}.log"), "w")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        return p

    addr_file = os.path.join(args.out, "scheduler.addr")
    if os.path.exists(addr_file):
        os.remove(addr_file)
    procs = {}
    durability = (["--replication", f"--scheduler_recovery_ms={RECOVERY_MS}"] if args.exact else
                  ["--replace_servers_ms=120000", f"--checkpoint_dir={ckpt}",
                   f"--checkpoint_every_s={args.checkpoint_every_s}"])
    def scheduler(bind):
        return spawn("scheduler", [
            layerps.tool_path("layerps-scheduler"), f"--num_servers={args.servers}", "--num_workers=2",
            f"--scheduler={bind}", f"--address_file={addr_file}", *HB, "--tolerate_worker_loss",
            *durability])

    procs["scheduler"] = scheduler("tcp://127.0.0.1:0")
    deadline = time.time() + 30
    while not os.path.exists(addr_file):
        if time.time() > deadline or procs["scheduler"].poll() is not None:
            sys.exit("the scheduler did not start (see " + logs + ")")
        time.sleep(0.1)
    address = open(addr_file).read().strip()

    def server(rank, restore=False):
        return spawn(f"server{rank}", [
            layerps.tool_path("layerps-server"), f"--scheduler={address}", f"--rank={rank}", *HB,
            "--connect_timeout_ms=60000", *([f"--restore={ckpt}"] if restore else []),
            *([f"--scheduler_recovery_ms={RECOVERY_MS}"] if args.exact else [])])

    def worker():
        return spawn("worker", [sys.executable, os.path.abspath(__file__), "--worker",
                                *(["--exact"] if args.exact else []),
                                f"--scheduler={address}", f"--out={args.out}",
                                f"--dense={args.dense}", f"--batch={args.batch}",
                                f"--capacity={args.capacity}", f"--step_sleep_s={args.step_sleep_s}"])

    for r in range(args.servers):
        procs[f"server{r}"] = server(r)
    procs["worker0"] = worker()
    time.sleep(1)  # worker 0 registers first: it keeps rank 0
    procs["worker1"] = worker()

    start = time.time()
    csv = open(os.path.join(args.out, "rss.csv"), "w")
    csv.write("t_s,process,pid,rss_kib\n")
    samples = {}  # (process, pid) -> [(t, rss)]
    faults = []
    failures = []
    next_sample = start
    next_fault = start + args.fault_every
    kill_server = not args.exact  # --exact: worker, server, worker, server...
    killed = 0  # worker incarnations killed (--exact: each may leave one push in flight)
    servers_killed = []  # --exact: server ranks killed (their backups took over)
    while time.time() - start < args.seconds:
        now = time.time()
        if now >= next_sample:
            for name, p in procs.items():
                r = rss_kib(p.pid)
                if r is not None and p.poll() is None:
                    csv.write(f"{now - start:.1f},{name},{p.pid},{r}\n")
                    samples.setdefault((name, p.pid), []).append((now - start, r))
            csv.flush()
            next_sample += args.sample_s
        live_servers = [f"server{r}" for r in range(args.servers)
                        if r == 0 or (args.exact and f"server{r}" not in servers_killed)]
        for name in ["scheduler", "worker0"] + live_servers:
            if procs[name].poll() is not None:
                failures.append(f"{name} exited with {procs[name].returncode} at {now - start:.0f} s")
        if failures:
            break
        if now >= next_fault:
            next_fault += args.fault_every
            name = "server1" if kill_server else "worker1"
            if args.exact:
                # worker, server, scheduler, server, worker, then worker and scheduler in turn.
                plan = ["worker1", "server", "scheduler", "server", "worker1"]
                name = plan[len(faults)] if len(faults) < len(plan) else \
                    ("worker1", "scheduler")[(len(faults) - len(plan)) % 2]
                if name == "server":
                    name = f"server{len(servers_killed) + 1}"
                    if len(servers_killed) + 1 >= args.servers:
                        name = "worker1"  # server rank 0 is the last
                if name == "scheduler":
                    old = procs["scheduler"]
                    old.send_signal(signal.SIGKILL)
                    old.wait()
                    t0 = time.time()
                    # The same address: the nodes know no other (docs/recovery.md).
                    procs["scheduler"] = scheduler(address)
                    faults.append(f"{now - start:.0f} s: SIGKILL scheduler (pid {old.pid}); a new one "
                                  f"(pid {procs['scheduler'].pid}) started on {address}")
                    print(faults[-1], flush=True)
                    continue
            old = procs[name]
            old.send_signal(signal.SIGKILL)
            old.wait()
            t0 = time.time()
            if name == "worker1":
                killed += 1
                open(os.path.join(args.out, "killed"), "w").write(str(killed))
            if args.exact and name.startswith("server"):
                # Its backup takes its ranges over (docs/replication.md); no replacement.
                servers_killed.append(name)
                faults.append(f"{now - start:.0f} s: SIGKILL {name} (pid {old.pid}); its backup took over")
                print(faults[-1], flush=True)
                kill_server = False
                continue
            # The scheduler must declare the killed process dead first: until then a new
            # one is refused (the cluster is complete) and exits at once. Retry.
            while True:
                time.sleep(1)
                p = server(1, restore=True) if name.startswith("server") else worker()
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    procs[name] = p
                    break
                if time.time() - t0 > 60:
                    failures.append(f"no new {name} was accepted within 60 s")
                    break
            if failures:
                break
            faults.append(f"{now - start:.0f} s: SIGKILL {name} (pid {old.pid}), new pid "
                          f"{procs[name].pid} after {time.time() - t0:.1f} s")
            print(faults[-1], flush=True)
            kill_server = not kill_server and not args.exact
        time.sleep(0.2)

    open(os.path.join(args.out, "stop"), "w").close()
    codes = {}
    for name in ("worker0", "worker1"):
        try:
            codes[name] = procs[name].wait(timeout=300)
        except subprocess.TimeoutExpired:
            codes[name] = "hung"
    for name in [f"server{r}" for r in range(args.servers)] + ["scheduler"]:
        if name in servers_killed:
            continue  # killed on purpose, not replaced
        try:
            codes[name] = procs[name].wait(timeout=60)
        except subprocess.TimeoutExpired:
            codes[name] = "hung"
    for p in procs.values():
        if p.poll() is None:
            p.kill()
    csv.close()

    steps = 0
    for f in os.listdir(args.out):
        if f.startswith("steps-"):
            steps += int(open(os.path.join(args.out, f)).read() or 0)
        elif f.startswith("acked-") and not f.endswith(".tmp"):  # --exact: acknowledged dense pushes
            steps += int((open(os.path.join(args.out, f)).read() or "0").split()[0])
    lines = [f"Soak of {time.time() - start:.0f} s on {os.cpu_count()} cores: {len(faults)} faults, "
             f"{steps} worker steps in all; exit codes {codes}",
             "", "| process | pid | lived (s) | RSS after warm-up (MiB) | at end (MiB) | max (MiB) |",
             "|---|---|---|---|---|---|"]
    for (name, pid), pts in sorted(samples.items(), key=lambda kv: kv[1][0][0]):
        ref = next((r for t, r in pts if t >= pts[0][0] + args.warmup_s), None)
        lines.append(f"| {name} | {pid} | {pts[-1][0] - pts[0][0]:.0f} | "
                     f"{'-' if ref is None else f'{ref / 1024:.1f}'} | {pts[-1][1] / 1024:.1f} | "
                     f"{max(r for _, r in pts) / 1024:.1f} |")
    lines += ["", "Faults:"] + [f"- {f}" for f in faults]
    if args.exact:
        verdict_path = os.path.join(args.out, "verdict")
        verdict = open(verdict_path).read() if os.path.exists(verdict_path) else "EXACT FAILED: no verdict written"
        lines += ["", verdict]
        if not verdict.startswith("EXACT OK"):
            failures.append(verdict)
        for name in ("scheduler", "server0", "worker0"):
            pts = samples.get((name, procs[name].pid), [])
            ref = next((r for t, r in pts if t >= args.warmup_s), None)
            if ref is not None and pts[-1][1] - ref > args.rss_slack_mib * 1024:
                failures.append(f"{name}: RSS rose from {ref / 1024:.1f} MiB after warm-up to "
                                f"{pts[-1][1] / 1024:.1f} MiB (more than {args.rss_slack_mib} MiB)")
        if len(faults) < 3:
            failures.append(f"only {len(faults)} faults injected (3 wanted: raise --seconds)")
        restarts = sum("SIGKILL scheduler" in f for f in faults)
        took_over = sum(open(os.path.join(logs, f)).read().count("took the cluster over")
                        for f in os.listdir(logs) if f.endswith("-scheduler.log"))
        if took_over != restarts:
            failures.append(f"the scheduler was restarted {restarts} time(s) but took the cluster "
                            f"over {took_over} time(s) (see {logs})")
    if failures:
        lines += ["", "FAILURES:"] + [f"- {f}" for f in failures]
    text = "\n".join(lines)
    print(text)
    open(os.path.join(args.out, "summary.md"), "w").write(text + "\n")
    ok = not failures and all(c == 0 for c in codes.values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
