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

--exact (the short soak CI runs, tests/python/test_soak.py, and the 30-minute random soak):
the scheduler runs with --replication instead of checkpoints, every node with
--scheduler_recovery_ms, and every value is known. Each worker step adds 1 to every element
of a dense 'sum' table and to its own rows of a sparse 'sum' table, and records each push
once it is acknowledged. The faults follow a random schedule drawn up front from --seed
(printed at the start with the command that replays it; --print_schedule prints it and
exits). The gaps between faults are uniform in [0.5, 1.5] x --fault_every (5 s at least),
and each fault's kind is drawn from those still possible:
  worker            worker rank 1 SIGKILLed; a new worker takes its rank and rows;
  server            a server of rank >= 1 SIGKILLed (each at most once): its backup takes its
                    ranges over, no replacement; the next fault waits until the servers whose
                    backup changed or whose ranges grew copied them to their backup;
  scheduler         the scheduler SIGKILLed and a new one started on its address 0-3 s later:
                    it takes the running cluster over (docs/recovery.md);
  scheduler+worker, the scheduler SIGKILLed, worker rank 1 (or a server) SIGKILLed 0-1.5 s
  scheduler+server  later while it is down, and a new scheduler started 2-5 s after that: it
                    must declare that node dead, and only that one.
A fault is injected at its time in the schedule, or 5 s after the cluster recovered from
the one before if that is later (the waits are bounded); the run goes on until every
fault of the schedule was injected. Server rank 0 and worker rank 0 are never killed.
At the end every worker flushes and meets the others, and worker rank 0 pulls both tables and
checks them against the acknowledged pushes: an element must equal their count, or exceed
it by at most the pushes that were in flight when a worker was killed (never less: nothing
acknowledged may be lost). Also checked: the RSS of the (last) scheduler, server rank 0 and
worker rank 0 stays within --rss_slack_mib of its value after warm-up; every scheduler started
on the old one's address took the cluster over; the scheduler logs declared exactly the
killed nodes dead. The last line printed is the result ("RESULT: EXACT OK; N faults
injected (by kind); M acknowledged pushes; lost: 0; ...").

  PYTHONPATH=build/bindings/python python3 bench/soak.py --seconds 1800 --out /tmp/soak
  .venv/bin/python bench/soak.py --exact --seconds 120 --fault_every 20 --servers 3 --seed 40 --out /tmp/short
  .venv/bin/python bench/soak.py --exact --seconds 1800 --fault_every 60 --servers 4 --seed 40 --print_schedule
"""

import argparse
import collections
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import time

HB = ["--heartbeat_interval_ms=200", "--heartbeat_timeout_ms=2000"]
RECOVERY_MS = 60000  # --exact: how long the nodes wait for a restarted scheduler
SETTLE_S = 5  # --exact: the least gap between faults, and after a fault's recovery
WAIT_S = 90  # --exact: the longest wait for one step of a recovery (generous: a busy 2-core VM)

# --exact's fault kinds (see the top).
KINDS = ("worker", "server", "scheduler", "scheduler+worker", "scheduler+server")
# at: seconds from the start; victim: worker1, server<rank> or scheduler; kill_after_s:
# scheduler+*: the node is killed this long after the scheduler; restart_after_s: scheduler*:
# the new scheduler starts this long after the last kill.
Fault = collections.namedtuple("Fault", "at kind victim kill_after_s restart_after_s")

# The lines the scheduler writes when it declares a node dead (src/scheduler/membership.cc
# MarkDead: "worker rank 2 (node 7) is dead: ..."; src/scheduler/failover.cc: "server rank 1
# (node 3) is dead: ..."; schedulers before 2026-12 wrote "worker node 7 is dead: ...").
# Checkpoint rounds write "... is dead; ...", which this does not match.
DEAD_LINE = re.compile(r"\b(server|worker) (?:rank (\d+) \(node (\d+)\)|node (\d+)) is dead: ")


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def draw_schedule(seed, seconds, fault_every, servers):
    """--exact's faults, all drawn up front from random.Random(seed): the same seed,
    --seconds, --fault_every and --servers give the same schedule (a replay)."""
    rng = random.Random(seed)
    killable = list(range(1, servers))  # server ranks not killed yet (rank 0 lives)
    last = seconds - max(SETTLE_S, fault_every / 2)  # the last fault leaves time to recover
    faults, t = [], 0.0
    while True:
        t += max(SETTLE_S, rng.uniform(0.5, 1.5) * fault_every)
        if t > last:
            return faults
        kind = rng.choice([k for k in KINDS if killable or not k.endswith("server")])
        if kind.endswith("worker"):
            victim = "worker1"
        elif kind.endswith("server"):
            rank = rng.choice(killable)
            killable.remove(rank)
            victim = f"server{rank}"
        else:
            victim = "scheduler"
        combined = kind.startswith("scheduler+")
        kill_after = round(rng.uniform(0, 1.5), 1) if combined else 0.0
        restart_after = round(rng.uniform(2, 5) if combined else rng.uniform(0, 3), 1) \
            if kind.startswith("scheduler") else 0.0
        faults.append(Fault(round(t, 1), kind, victim, kill_after, restart_after))


def describe(f):
    if f.kind == "worker":
        return "SIGKILL worker1; a new worker takes rank 1"
    if f.kind == "server":
        return f"SIGKILL {f.victim}; its backup takes its ranges over"
    if f.kind == "scheduler":
        return f"SIGKILL scheduler; a new one {f.restart_after_s} s later"
    return (f"SIGKILL scheduler, {f.kill_after_s} s later {f.victim} while it is down; a new "
            f"scheduler {f.restart_after_s} s after that")


def schedule_lines(seed, faults, args):
    argv = []  # this command line without its --seed (and --print_schedule), for the replay
    skip = False
    for a in sys.argv[1:]:
        if skip:
            skip = False
        elif a == "--seed":
            skip = True
        elif not a.startswith("--seed=") and a != "--print_schedule":
            argv.append(a)
    replay = shlex.join([os.path.basename(sys.executable), sys.argv[0], *argv, "--seed", str(seed)])
    counts = collections.Counter(f.kind for f in faults)
    lines = [f"seed {seed}: replay with --seed {seed} (and the same --seconds, --fault_every, "
             f"--servers): {replay}",
             f"schedule: {len(faults)} faults in {args.seconds:g} s ("
             + ", ".join(f"{k} {counts[k]}" for k in KINDS if counts[k]) + ")"]
    lines += [f"  #{i + 1} at {f.at:.1f} s: {f.kind} ({describe(f)})" for i, f in enumerate(faults)]
    return lines


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
    # Its existence also tells the soak this process was accepted into its rank.
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
        lost = max(0, want_dense - int(got.min()))  # acknowledged pushes missing
        if not (got.min() >= want_dense and got.max() <= want_dense + killed):
            problems.append(f"dense: elements in [{got.min()}, {got.max()}], acknowledged {want_dense}, "
                            f"in flight at kills at most {killed}")
        for rank, incarnations in sorted(done.items()):
            rids = (np.arange(args.batch, dtype=np.int64) * 1009 + (rank << 32))
            rows = w.pull_sparse(s, rids).wait(timeout=120)
            want = sum(r for _, r in incarnations)
            lost += max(0, want - int(rows.min()))
            if not (rows.min() >= want and rows.max() <= want + killed):
                problems.append(f"rows of rank {rank}: in [{rows.min()}, {rows.max()}], acknowledged {want}")
        verdict = "EXACT OK" if not problems else "EXACT FAILED: " + "; ".join(problems)
        verdict += (f" (dense {got[0]:.0f} = {want_dense} acknowledged pushes of {len(done)} ranks; "
                    f"lost: {lost})")
        open(os.path.join(args.out, "verdict"), "w").write(verdict)
        print(verdict, flush=True)
    w.barrier("workers", timeout=300)
    w.stop()


class Soak:
    """The daemons of one soak run, their logs, the RSS samples and the failures seen."""

    def __init__(self, args):
        import layerps

        self.args = args
        self.layerps = layerps
        self.logs = os.path.join(args.out, "logs")
        self.ckpt = os.path.join(args.out, "ckpt")
        self.addr_file = os.path.join(args.out, "scheduler.addr")
        self.nlog = 0
        self.log_of = {}  # pid -> its log
        self.procs = {}  # name -> the live (or last) process of that name
        self.down = set()  # names killed on purpose and not (yet) restarted
        self.failures = []
        self.faults = []  # what was injected, as printed
        self.samples = {}  # (process, pid) -> [(t, rss)]
        self.killed_workers = 0  # worker incarnations killed (each may leave a push in flight)
        self.killed_servers = []  # --exact: server ranks killed (their backups took over)
        self.start = time.time()
        self.next_sample = self.start
        self.csv = None

    def spawn(self, name, argv, daemon=True):
        self.nlog += 1
        path = os.path.join(self.logs, f"{self.nlog:03d}-{name}.log")
        log = open(path, "w")
        # The daemons log at INFO: the soak reads their logs (deaths, takeovers, copies).
        env = dict(os.environ, LAYERPS_LOG_LEVEL="INFO") if daemon else None
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()
        self.log_of[p.pid] = path
        return p

    def log(self, name):
        return read(self.log_of[self.procs[name].pid])

    def scheduler(self, bind):
        a = self.args
        durability = (["--replication", f"--scheduler_recovery_ms={RECOVERY_MS}"] if a.exact else
                      ["--replace_servers_ms=120000", f"--checkpoint_dir={self.ckpt}",
                       f"--checkpoint_every_s={a.checkpoint_every_s}"])
        return self.spawn("scheduler", [
            self.layerps.tool_path("layerps-scheduler"), f"--num_servers={a.servers}", "--num_workers=2",
            f"--scheduler={bind}", f"--address_file={self.addr_file}", *HB, "--tolerate_worker_loss",
            *durability])

    def server(self, rank, restore=False):
        return self.spawn(f"server{rank}", [
            self.layerps.tool_path("layerps-server"), f"--scheduler={self.address}", f"--rank={rank}", *HB,
            "--connect_timeout_ms=60000", *([f"--restore={self.ckpt}"] if restore else []),
            *([f"--scheduler_recovery_ms={RECOVERY_MS}"] if self.args.exact else [])])

    def worker(self):
        a = self.args
        return self.spawn("worker", [sys.executable, os.path.abspath(__file__), "--worker",
                                     *(["--exact"] if a.exact else []),
                                     f"--scheduler={self.address}", f"--out={a.out}",
                                     f"--dense={a.dense}", f"--batch={a.batch}",
                                     f"--capacity={a.capacity}", f"--step_sleep_s={a.step_sleep_s}"],
                          daemon=False)

    def launch(self):
        a = self.args
        os.makedirs(a.out, exist_ok=True)
        for f in os.listdir(a.out):
            if f in ("stop", "killed", "verdict") or f.startswith("steps-") or f.startswith("acked-"):
                os.remove(os.path.join(a.out, f))
        subprocess.run(["rm", "-rf", self.ckpt, self.logs], check=True)
        os.makedirs(self.logs, exist_ok=True)
        if os.path.exists(self.addr_file):
            os.remove(self.addr_file)
        self.procs["scheduler"] = self.scheduler("tcp://127.0.0.1:0")
        deadline = time.time() + 30
        while not os.path.exists(self.addr_file):
            if time.time() > deadline or self.procs["scheduler"].poll() is not None:
                sys.exit("the scheduler did not start (see " + self.logs + ")")
            time.sleep(0.1)
        self.address = open(self.addr_file).read().strip()
        for r in range(a.servers):
            self.procs[f"server{r}"] = self.server(r)
        self.procs["worker0"] = self.worker()
        time.sleep(1)  # worker 0 registers first: it keeps rank 0
        self.procs["worker1"] = self.worker()
        self.start = time.time()
        self.next_sample = self.start
        self.csv = open(os.path.join(a.out, "rss.csv"), "w")
        self.csv.write("t_s,process,pid,rss_kib\n")

    def sample(self):
        now = time.time()
        if now < self.next_sample:
            return
        for name, p in self.procs.items():
            r = rss_kib(p.pid)
            if r is not None and p.poll() is None:
                self.csv.write(f"{now - self.start:.1f},{name},{p.pid},{r}\n")
                self.samples.setdefault((name, p.pid), []).append((now - self.start, r))
        self.csv.flush()
        while self.next_sample <= now:
            self.next_sample += self.args.sample_s

    def check_alive(self):
        """Appends a failure for each process that must live and exited; True if none."""
        must = ["scheduler", "worker0"] + [f"server{r}" for r in range(self.args.servers)
                                           if r == 0 or self.args.exact]
        if self.args.exact:
            must.append("worker1")
        for name in must:
            if name not in self.down and self.procs[name].poll() is not None:
                self.failures.append(f"{name} exited with {self.procs[name].returncode} at "
                                     f"{time.time() - self.start:.0f} s (see {self.logs})")
                self.down.add(name)  # reported once
        return not self.failures

    def wait_until(self, done, what, timeout=WAIT_S):
        """Waits for done() (sampling RSS meanwhile); False, with a failure, on a timeout
        or when a process that must live exited."""
        deadline = time.time() + timeout
        while not done():
            if not self.check_alive():
                return False
            if time.time() > deadline:
                self.failures.append(f"{what}: not within {timeout} s (see {self.logs})")
                return False
            self.sample()
            time.sleep(0.2)
        return True

    def kill(self, name):
        p = self.procs[name]
        p.send_signal(signal.SIGKILL)
        p.wait()
        self.down.add(name)
        if name == "worker1":
            self.killed_workers += 1
            open(os.path.join(self.args.out, "killed"), "w").write(str(self.killed_workers))
        return p.pid

    def restart_worker(self):
        """A new worker 1. The scheduler refuses it (and it exits at once) until it declared
        the killed one dead: retried every second. --exact: it was accepted once it wrote
        its acked-rank1-<pid> file; otherwise once it runs 5 s."""
        deadline = time.time() + WAIT_S
        while time.time() < deadline:
            p = self.worker()
            if self.args.exact:
                accepted = os.path.join(self.args.out, f"acked-rank1-{p.pid}")
                self.wait_until(lambda: os.path.exists(accepted) or p.poll() is not None,
                                "a new worker 1 registering", timeout=WAIT_S)
                ok = os.path.exists(accepted)
            else:
                try:
                    p.wait(timeout=5)
                    ok = False
                except subprocess.TimeoutExpired:
                    ok = True
            if ok:
                self.procs["worker1"] = p
                self.down.discard("worker1")
                return True
            if p.poll() is None:
                p.kill()
                p.wait()
            if self.failures:
                return False
            time.sleep(1)
        self.failures.append(f"no new worker 1 was accepted within {WAIT_S} s (see {self.logs})")
        return False

    def restart_scheduler(self):
        """A new scheduler on the old one's address (the nodes know no other,
        docs/recovery.md); True once it took the running cluster over."""
        self.procs["scheduler"] = self.scheduler(self.address)
        self.down.discard("scheduler")
        return self.wait_until(lambda: "took the cluster over" in self.log("scheduler"),
                               f"the new scheduler (pid {self.procs['scheduler'].pid}) taking the cluster over")

    def copy_lines(self, rank):
        """The lines of server `rank`'s log about copying its ranges to its backup."""
        marks = ("copying this server's ranges to its backup",
                 "holds a complete copy of this server's ranges",
                 "this server runs without a backup", "this server has no backup now")
        return [line for line in self.log(f"server{rank}").splitlines() if any(m in line for m in marks)]

    def await_server_death(self, rank, copies_before):
        """After server `rank` was killed: the scheduler declares it dead, its backup takes
        its ranges over, and then the live servers whose backup changed (the one before it in
        the ring of live ranks) or whose ranges grew (its backup, the one after it) copy
        their ranges to their backup. The next server death loses nothing once both copies
        were acknowledged."""
        dead = re.compile(rf"\bserver rank {rank} \(node \d+\) is dead: ")
        if not self.wait_until(lambda: dead.search(self.log("scheduler")),
                               f"the scheduler declaring server rank {rank} dead"):
            return False
        live = [r for r in range(self.args.servers) if r not in self.killed_servers]
        if len(live) < 2:
            return True  # server rank 0 alone: no backup
        after = [r for r in live if r > rank]
        before = [r for r in live if r < rank]
        copiers = {after[0] if after else live[0], before[-1] if before else live[-1]}

        def copied():
            for r in copiers:
                lines = self.copy_lines(r)
                if len(lines) <= copies_before[r] or "holds a complete copy" not in lines[-1]:
                    return False
            return True

        return self.wait_until(copied, "server ranks " + " and ".join(map(str, sorted(copiers))) +
                               f" copying their ranges to their new backup after server rank {rank} died")

    def inject(self, f):
        """Injects fault f of the schedule and waits until the cluster recovered from it
        (every wait bounded). False on a failure."""
        t = time.time() - self.start
        victim = f.victim
        copies_before = {r: len(self.copy_lines(r)) for r in range(self.args.servers)
                         if r not in self.killed_servers and f"server{r}" != victim}
        killed = []  # (name, pid) in the order killed
        if f.kind.startswith("scheduler"):
            killed.append(("scheduler", self.kill("scheduler")))
            time.sleep(f.kill_after_s)
        if victim != "scheduler":
            killed.append((victim, self.kill(victim)))
        if victim.startswith("server"):
            self.killed_servers.append(int(victim[len("server"):]))
        if f.kind.startswith("scheduler"):
            time.sleep(f.restart_after_s)
        t0 = time.time()
        ok = not f.kind.startswith("scheduler") or self.restart_scheduler()
        if ok and victim == "worker1":
            ok = self.restart_worker()
        if ok and victim.startswith("server"):
            ok = self.await_server_death(int(victim[len("server"):]), copies_before)
        new = [f"scheduler pid {self.procs['scheduler'].pid}" if f.kind.startswith("scheduler") else "",
               f"worker1 pid {self.procs['worker1'].pid}" if ok and victim == "worker1" else ""]
        self.faults.append(f"{t:.0f} s (planned {f.at:.0f} s): {f.kind}: SIGKILL "
                           + ", then ".join(f"{n} (pid {pid})" for n, pid in killed)
                           + ("; recovered" if ok else "; FAILED")
                           + f" {time.time() - t0:.1f} s after the "
                           + ("new scheduler started" if f.kind.startswith("scheduler") else "kill")
                           + "".join(f"; new {x}" for x in new if x))
        print(self.faults[-1], flush=True)
        return ok

    def inject_alternating(self, kill_server):
        """Without --exact: server rank 1 killed and replaced from the checkpoints, or
        worker rank 1 killed and restarted."""
        name = "server1" if kill_server else "worker1"
        t = time.time() - self.start
        old = self.procs[name]
        self.kill(name)
        t0 = time.time()
        if name == "worker1":
            ok = self.restart_worker()
        else:
            # The scheduler must declare the killed server dead first: until then a new
            # one is refused (the cluster is complete) and exits at once. Retry.
            ok = False
            while time.time() - t0 < 60:
                time.sleep(1)
                p = self.server(1, restore=True)
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.procs[name] = p
                    self.down.discard(name)
                    ok = True
                    break
            if not ok:
                self.failures.append(f"no new {name} was accepted within 60 s")
        if ok:
            self.faults.append(f"{t:.0f} s: SIGKILL {name} (pid {old.pid}), new pid "
                               f"{self.procs[name].pid} after {time.time() - t0:.1f} s")
            print(self.faults[-1], flush=True)
        return ok

    def run(self, schedule):
        a = self.args
        pending = list(schedule)
        ready = self.start  # --exact: the cluster recovered from the last fault (+ SETTLE_S)
        next_fault = self.start + a.fault_every  # without --exact
        kill_server = True
        while True:
            now = time.time()
            self.sample()
            if not self.check_alive():
                return
            if a.exact:
                if pending and now >= max(self.start + pending[0].at, ready):
                    if not self.inject(pending.pop(0)):
                        return
                    ready = time.time() + SETTLE_S
                    continue
                if now - self.start >= a.seconds and not pending and now >= ready:
                    return
            else:
                if now - self.start >= a.seconds:
                    return
                if now >= next_fault:
                    next_fault += a.fault_every
                    if not self.inject_alternating(kill_server):
                        return
                    kill_server = not kill_server
                    continue
            time.sleep(0.2)

    def stop(self):
        """Stops the workers (they finish, and with --exact check the sums), then the rest."""
        open(os.path.join(self.args.out, "stop"), "w").close()
        codes = {}
        for name in ("worker0", "worker1"):
            try:
                codes[name] = self.procs[name].wait(timeout=300)
            except subprocess.TimeoutExpired:
                codes[name] = "hung"
        for name in [f"server{r}" for r in range(self.args.servers)] + ["scheduler"]:
            if name in self.down:
                continue  # killed on purpose and not replaced, or reported as exited
            try:
                codes[name] = self.procs[name].wait(timeout=60)
            except subprocess.TimeoutExpired:
                codes[name] = "hung"
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
        self.csv.close()
        return codes

    def scheduler_logs(self):
        return [read(os.path.join(self.logs, f)) for f in sorted(os.listdir(self.logs))
                if f.endswith("-scheduler.log")]

    def check_deaths(self):
        """The nodes the schedulers declared dead are the nodes killed: as many workers,
        and the same server ranks. Returns the death lines."""
        lines = [line.strip() for text in self.scheduler_logs() for line in text.splitlines()
                 if DEAD_LINE.search(line)]
        workers = sum(DEAD_LINE.search(line).group(1) == "worker" for line in lines)
        servers = sorted(int(m.group(2)) if m.group(2) else -1 for m in map(DEAD_LINE.search, lines)
                         if m.group(1) == "server")
        if workers != self.killed_workers or servers != sorted(self.killed_servers):
            self.failures.append(
                f"the scheduler logs declared {workers} worker(s) and server rank(s) {servers} dead "
                f"({len(lines)} node(s)), but {self.killed_workers} worker(s) and server rank(s) "
                f"{sorted(self.killed_servers)} were killed (see {self.logs})")
        return lines


def main():
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="--exact and its random fault schedule: see the top of bench/soak.py and bench/SOAK.md")
    ap.add_argument("--seconds", type=float, default=1800, help="how long to train (default 1800)")
    ap.add_argument("--fault_every", type=float, default=120,
                    help="seconds between faults (default 120); --exact: their mean gap (uniform in "
                         f"[0.5, 1.5] x this, at least {SETTLE_S} s)")
    ap.add_argument("--seed", type=int,
                    help="--exact: the seed of the fault schedule (default: from the time; printed "
                         "with the command that replays the run)")
    ap.add_argument("--print_schedule", action="store_true",
                    help="--exact: print the fault schedule of --seed, --seconds, --fault_every and "
                         "--servers, and exit (nothing is started)")
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
                    help="server processes (default 2); --exact kills each rank but 0 at most once")
    ap.add_argument("--out", help="directory for logs, checkpoints, rss.csv, summary.md (required "
                                  "but with --print_schedule)")
    ap.add_argument("--exact", action="store_true",
                    help="replication instead of checkpoints, known increments checked at the end, "
                         "RSS bounded, a random fault schedule (the soak of CI; see the top)")
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
    if args.print_schedule and not args.exact:
        ap.error("--print_schedule needs --exact (only --exact draws a random schedule)")
    if not args.out and not args.print_schedule:
        ap.error("--out is required")

    seed = args.seed if args.seed is not None else int(time.time() * 1000) % 1000000
    schedule = draw_schedule(seed, args.seconds, args.fault_every, args.servers) if args.exact else []
    head = schedule_lines(seed, schedule, args) if args.exact else []
    if head:
        print("\n".join(head), flush=True)
    if args.print_schedule:
        return 0

    soak = Soak(args)
    soak.launch()
    soak.run(schedule)
    codes = soak.stop()
    logs, samples, failures, faults = soak.logs, soak.samples, soak.failures, soak.faults

    steps = pushes = 0
    for f in os.listdir(args.out):
        if f.startswith("steps-"):
            steps += int(read(os.path.join(args.out, f)) or 0)
        elif f.startswith("acked-") and not f.endswith(".tmp"):  # --exact: acknowledged pushes
            dense, rows = (int(x) for x in (read(os.path.join(args.out, f)) or "0 0").split())
            steps += dense
            pushes += dense + rows
    lines = head + [""] if head else []
    lines += [f"Soak of {time.time() - soak.start:.0f} s on {os.cpu_count()} cores: {len(faults)} faults, "
              f"{steps} worker steps in all; exit codes {codes}",
              "", "| process | pid | lived (s) | RSS after warm-up (MiB) | at end (MiB) | max (MiB) |",
              "|---|---|---|---|---|---|"]
    for (name, pid), pts in sorted(samples.items(), key=lambda kv: kv[1][0][0]):
        ref = next((r for t, r in pts if t >= pts[0][0] + args.warmup_s), None)
        lines.append(f"| {name} | {pid} | {pts[-1][0] - pts[0][0]:.0f} | "
                     f"{'-' if ref is None else f'{ref / 1024:.1f}'} | {pts[-1][1] / 1024:.1f} | "
                     f"{max(r for _, r in pts) / 1024:.1f} |")
    lines += ["", "Faults:"] + [f"- {f}" for f in faults]
    result = None
    if args.exact:
        verdict = read(os.path.join(args.out, "verdict")) or "EXACT FAILED: no verdict written"
        lines += ["", verdict]
        if not verdict.startswith("EXACT OK"):
            failures.append(verdict)
        for name in ("scheduler", "server0", "worker0"):
            pts = samples.get((name, soak.procs[name].pid), [])
            ref = next((r for t, r in pts if t >= args.warmup_s), None)
            if ref is not None and pts[-1][1] - ref > args.rss_slack_mib * 1024:
                failures.append(f"{name}: RSS rose from {ref / 1024:.1f} MiB after warm-up to "
                                f"{pts[-1][1] / 1024:.1f} MiB (more than {args.rss_slack_mib} MiB)")
        if len(faults) < len(schedule):
            failures.append(f"{len(faults)} of the schedule's {len(schedule)} faults injected")
        restarts = sum(f.kind.startswith("scheduler") for f in schedule[:len(faults)])
        took_over = sum(text.count("took the cluster over") for text in soak.scheduler_logs())
        if took_over != restarts:
            failures.append(f"the scheduler was restarted {restarts} time(s) but took the cluster "
                            f"over {took_over} time(s) (see {logs})")
        dead = soak.check_deaths()
        lines += ["", f"Declared dead by the schedulers ({len(dead)}):"] + [f"- {d}" for d in dead]
        counts = collections.Counter(f.kind for f in schedule[:len(faults)])
        lost = re.search(r"lost: (\d+)", verdict)
        ok = not failures and all(c == 0 for c in codes.values())
        result = (f"RESULT: {'EXACT OK' if ok else 'FAILED'}; {len(faults)} faults injected ("
                  + ", ".join(f"{k} {counts[k]}" for k in KINDS if counts[k]) + f"); {pushes} "
                  f"acknowledged pushes; lost: {lost.group(1) if lost else 'unknown'}; "
                  f"{len(dead)} nodes declared dead, "
                  f"{soak.killed_workers + len(soak.killed_servers)} killed; seed {seed}")
    if failures:
        lines += ["", "FAILURES:"] + [f"- {f}" for f in failures]
    if result:
        lines += ["", result]
    text = "\n".join(lines)
    print(text)
    open(os.path.join(args.out, "summary.md"), "w").write(text + "\n")
    ok = not failures and all(c == 0 for c in codes.values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
