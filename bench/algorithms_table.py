"""Ko et al.'s comparison at small scale (bench/ALGORITHMS.md): every algorithm trains a
model with W workers and S servers for the same epochs over several seeds; prints test
accuracy (mean +- sd over seeds, of the workers' mean), seconds per epoch (the slowest
worker), MB per worker per epoch and MB per epoch at the busiest server (bytes counted by
the workers, headers included, both directions).

    sudo .venv/bin/python bench/algorithms_table.py --model digits --epochs 4 --seeds 0,1,2
    sudo .venv/bin/python bench/algorithms_table.py --model digits --rate 100mbit   # tc-limited
    sudo .venv/bin/python bench/algorithms_table.py --rate 1gbit --straggler 3 --slowdown 2 \
        --warmup_steps 50 --decay cosine --target 0.9    # Ko et al.'s conditions

--straggler R makes worker R --slowdown times slower; --warmup_steps and --decay switch
the learning-rate warm-up and decay on. --target adds time-to-accuracy: for each run, the
training seconds (the slowest worker's) until the workers' mean test accuracy, measured
after every epoch, first reaches it; the table gives its mean over the runs that reached
it and how many did.

--eval_every_s E measures the accuracy instead after every E seconds of each worker's
training time, and time-to-accuracy becomes the first such moment at which the workers'
mean accuracy reaches --target. --time_budget_s S then trains the asynchronous
algorithms (asp, easgd, gosgd, adpsgd) for S seconds of training time each instead of
--epochs, so that fast workers make more steps than a straggler (the synchronous ones
still train for --epochs: their workers must make the same steps). MB per epoch counts
the epochs each worker made.

--rate puts the scheduler and the servers on one host and the workers on another
(network namespaces joined by a veth pair, both ends shaped with tc tbf to RATE): the
server host's link is the bottleneck, as in a PS cluster whose servers share one NIC.
Without --rate everything runs on loopback. Needs the package in .venv
(bash scripts/test-python.sh) and, for --rate, root and tc.
"""

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ALGORITHMS = ["bsp", "asp", "ssp(s=3)", "easgd(tau=4,alpha=0.5)", "arsgd", "gosgd(p=0.5)", "adpsgd"]
COMMON = ["--token=bench", "--heartbeat_interval_ms=500", "--heartbeat_timeout_ms=20000",
          "--connect_timeout_ms=60000"]


def sh(cmd):
    subprocess.run(cmd, shell=True, check=True)


class Hosts:
    """Two hosts: plain loopback, or two network namespaces with a tc-limited veth."""

    def __init__(self, rate):
        self.rate = rate
        self.ns = None
        if rate:
            tag = str(os.getpid())
            self.ns = (f"lpaS{tag}", f"lpaW{tag}")
            s, w = self.ns
            sh(f"ip netns add {s} && ip netns add {w}")
            sh(f"ip link add vs{tag} type veth peer name vw{tag}")
            sh(f"ip link set vs{tag} netns {s} && ip link set vw{tag} netns {w}")
            sh(f"ip -n {s} addr add 10.234.0.1/24 dev vs{tag} && ip -n {s} link set vs{tag} up && ip -n {s} link set lo up")
            sh(f"ip -n {w} addr add 10.234.0.2/24 dev vw{tag} && ip -n {w} link set vw{tag} up && ip -n {w} link set lo up")
            for ns, dev in ((s, f"vs{tag}"), (w, f"vw{tag}")):
                sh(f"ip netns exec {ns} tc qdisc add dev {dev} root tbf rate {rate} burst 256kb latency 400ms")

    def prefix(self, which):  # which: 0 = server host, 1 = worker host
        return ["ip", "netns", "exec", self.ns[which]] if self.ns else []

    def host(self, which):
        return ("10.234.0.1", "10.234.0.2")[which] if self.ns else "127.0.0.1"

    def close(self):
        if self.ns:
            for ns in self.ns:
                subprocess.run(["ip", "netns", "del", ns], check=False)


def run_one(hosts, args, algorithm, seed, work):
    py = args.python
    binp = subprocess.check_output([py, "-c", "import layerps; print(layerps.bin_dir())"], text=True).strip()
    addr_file = os.path.join(work, "addr")
    if os.path.exists(addr_file):
        os.remove(addr_file)
    procs = []
    logs = []

    def spawn(cmd, log, env=None):
        f = open(os.path.join(work, log), "w")
        logs.append(f)
        procs.append(subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env))
        return procs[-1]

    spawn(hosts.prefix(0) + [f"{binp}/layerps-scheduler", "--scheduler=tcp://0.0.0.0:0",
                             f"--advertise_host={hosts.host(0)}", f"--num_servers={args.servers}",
                             f"--num_workers={args.workers}", f"--address_file={addr_file}",
                             "--run_timeout_s=3600"] + COMMON, "scheduler.log")
    for _ in range(200):
        if os.path.exists(addr_file) and os.path.getsize(addr_file) > 0:
            break
        time.sleep(0.05)
    addr = open(addr_file).read().strip()
    for i in range(args.servers):
        spawn(hosts.prefix(0) + [f"{binp}/layerps-server", f"--scheduler={addr}", "--bind=tcp://0.0.0.0:0",
                                 f"--advertise_host={hosts.host(0)}", f"--rank={i}"] + COMMON, f"server{i}.log")
    out = os.path.join(work, "r-{rank}.json")
    workers = []
    for r in range(args.workers):
        env = dict(os.environ, LAYERPS_SCHEDULER=addr, LAYERPS_TOKEN="bench", LAYERPS_BIND="tcp://0.0.0.0:0",
                   LAYERPS_ADVERTISE_HOST=hosts.host(1), LAYERPS_RANK=str(r),
                   LAYERPS_HEARTBEAT_INTERVAL_MS="500", LAYERPS_HEARTBEAT_TIMEOUT_MS="20000",
                   LAYERPS_CONNECT_TIMEOUT_MS="60000", LAYERPS_REQUEST_TIMEOUT_MS="600000",
                   GLOG_minloglevel="2", OMP_NUM_THREADS="1")
        cmd = hosts.prefix(1) + [py, os.path.join(HERE, "algorithms_train.py"), "--algorithm", algorithm,
                                 "--model", args.model, "--epochs", str(args.epochs), "--batch", str(args.batch),
                                 "--lr", str(args.lr), "--limit", str(args.limit), "--seed", str(seed),
                                 "--json", out, "--straggler", str(args.straggler),
                                 "--slowdown", str(args.slowdown), "--warmup_steps", str(args.warmup_steps),
                                 "--decay", args.decay, "--gamma", str(args.gamma),
                                 "--decay_every", str(args.decay_every),
                                 "--eval_every_s", str(args.eval_every_s)]
        if args.time_budget_s > 0 and asynchronous(algorithm):
            cmd += ["--time_budget_s", str(args.time_budget_s)]
        if args.trace_dir:
            cmd += ["--trace", os.path.join(args.trace_dir, f"{algorithm}-seed{seed}.npy")]
        workers.append(spawn(cmd, f"worker{r}.log", env))
    failed = False
    for p in workers:
        failed |= p.wait(timeout=3600) != 0
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
    for f in logs:
        f.close()
    if failed:
        tail = subprocess.run(f"tail -n 5 {work}/*.log", shell=True, capture_output=True, text=True).stdout
        raise SystemExit(f"{algorithm} seed {seed} failed:\n{tail}")
    results = [json.load(open(out.replace("{rank}", str(r)))) for r in range(args.workers)]
    # Epochs each worker made (fractional under a time budget).
    made = [max(r["steps_done"] / r["steps_per_epoch"], 1e-9) for r in results]
    per_worker = [sum(v["bytes_sent"] + v["bytes_received"] for v in r["peers"].values()) / e
                  for r, e in zip(results, made)]
    servers = {}
    for r, e in zip(results, made):
        for pid, v in r["peers"].items():
            if v["role"] == "server":
                servers[pid] = servers.get(pid, 0) + (v["bytes_sent"] + v["bytes_received"]) / e
    epochs = min(len(r["accuracy_per_epoch"]) for r in results)  # completed by every worker
    to_target = None
    if args.target > 0 and args.eval_every_s > 0:
        # The first checkpoint (every worker at the same training seconds) at which the
        # workers' mean accuracy reaches the target.
        for k in range(min(len(r["checkpoints"]) for r in results)):
            if statistics.mean(r["checkpoints"][k][1] for r in results) >= args.target:
                to_target = results[0]["checkpoints"][k][0]
                break
    elif args.target > 0:
        # The first epoch after which the workers' mean accuracy reaches it, at the slowest
        # worker's training seconds by then.
        for e in range(epochs):
            if statistics.mean(r["accuracy_per_epoch"][e] for r in results) >= args.target:
                to_target = max(r["elapsed_seconds"][e] for r in results)
                break
    return dict(accuracy=statistics.mean(r["test_accuracy"] for r in results),
                accuracy_per_epoch=[statistics.mean(r["accuracy_per_epoch"][e] for r in results)
                                    for e in range(epochs)],
                checkpoints=[r["checkpoints"] for r in results],
                steps_done=[r["steps_done"] for r in results],
                seconds_to_target=to_target,
                accuracy_min=min(r["test_accuracy"] for r in results),
                seconds_per_epoch=max(r["seconds_per_epoch"] for r in results),
                mb_per_worker=statistics.mean(per_worker) / 1e6,
                mb_busiest_server=(max(servers.values()) if servers else 0.0) / 1e6,
                final_loss=statistics.mean(r["losses"][-1] for r in results))


def asynchronous(algorithm):
    return algorithm.split("(")[0].strip().lower() in ("asp", "easgd", "gosgd", "adpsgd")


def mean_sd(xs):
    return statistics.mean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=["digits", "digits_wide", "bigfc"], default="digits")
    p.add_argument("--algorithms", default=";".join(ALGORITHMS),
                   help="';'-separated list (default: all seven)")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--servers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--limit", type=int, default=0)
    p.add_argument("--rate", default="", help="tc tbf rate of the server host's link (e.g. 100mbit)")
    p.add_argument("--straggler", type=int, default=-1, help="this worker rank runs --slowdown times slower")
    p.add_argument("--slowdown", type=float, default=2.0)
    p.add_argument("--warmup_steps", type=int, default=0)
    p.add_argument("--decay", default="none", choices=["none", "step", "exponential", "cosine"])
    p.add_argument("--gamma", type=float, default=0.1,
                   help="decay factor: per --decay_every steps (step), per step (exponential)")
    p.add_argument("--decay_every", type=int, default=0,
                   help="steps between step decays; cosine: its period (0: the run's steps)")
    p.add_argument("--target", type=float, default=0.0,
                   help="test accuracy for the time-to-accuracy column (0: no column)")
    p.add_argument("--eval_every_s", type=float, default=0.0,
                   help="accuracy after every this many seconds of each worker's training time")
    p.add_argument("--time_budget_s", type=float, default=0.0,
                   help="the asynchronous algorithms train this many seconds each instead of --epochs")
    p.add_argument("--python", default=os.path.join(ROOT, ".venv", "bin", "python"))
    p.add_argument("--json", help="write every run's figures here")
    p.add_argument("--trace_dir", help="rank 0 of each run writes its parameters after every step to "
                   "DIR/<algorithm>-seed<seed>.npy (bench/algorithms_divergence.py reads them)")
    args = p.parse_args()
    if args.straggler >= args.workers or args.slowdown < 1:
        p.error("--straggler must name a worker rank (< --workers) or be -1, --slowdown >= 1")
    if args.decay == "step" and args.decay_every < 1:
        p.error("--decay step needs --decay_every >= 1")
    if args.trace_dir:
        args.trace_dir = os.path.abspath(args.trace_dir)
        os.makedirs(args.trace_dir, exist_ok=True)
    algorithms = [a.strip() for a in args.algorithms.split(";") if a.strip()]
    seeds = [int(s) for s in args.seeds.split(",")]
    hosts = Hosts(args.rate)
    raw = {}
    try:
        net = f"server host link {args.rate} (tc tbf)" if args.rate else "loopback"
        cond = (f"; worker {args.straggler} {args.slowdown:g}x slower" if args.straggler >= 0 else "") + \
            (f"; warm-up {args.warmup_steps} steps" if args.warmup_steps else "") + \
            (f"; decay {args.decay} (gamma {args.gamma:g}, every "
             f"{args.decay_every or 'the run: all its steps'})" if args.decay != "none" else "") + \
            (f"; asynchronous algorithms train {args.time_budget_s:g} s each" if args.time_budget_s > 0 else "") + \
            (f"; accuracy every {args.eval_every_s:g} s of training" if args.eval_every_s > 0 else "")
        print(f"# {args.model}, W={args.workers}, {args.servers} servers, {args.epochs} epochs, global batch "
              f"{args.batch}, lr {args.lr}, momentum 0.9, seeds {seeds}, {net}{cond}", flush=True)
        print(f"{'algorithm':24} {'test accuracy':>17} {'s/epoch':>8} {'MB/worker/epoch':>16} "
              f"{'MB/epoch busiest server':>24}" + (f" {'s to ' + format(args.target, 'g'):>16}" if args.target else ""),
              flush=True)
        for algorithm in algorithms:
            runs = []
            for seed in seeds:
                with tempfile.TemporaryDirectory(prefix="layerps-alg-") as work:
                    runs.append(run_one(hosts, args, algorithm, seed, work))
            raw[algorithm] = runs
            acc, acc_sd = mean_sd([r["accuracy"] for r in runs])
            sec, _ = mean_sd([r["seconds_per_epoch"] for r in runs])
            mbw, _ = mean_sd([r["mb_per_worker"] for r in runs])
            mbs, _ = mean_sd([r["mb_busiest_server"] for r in runs])
            tta = ""
            if args.target:
                reached = [r["seconds_to_target"] for r in runs if r["seconds_to_target"] is not None]
                tta = f" {(f'{statistics.mean(reached):.1f}' if reached else '-'):>10} ({len(reached)}/{len(runs)})"
            print(f"{algorithm:24} {acc:8.4f} +- {acc_sd:.4f} {sec:8.2f} {mbw:16.1f} {mbs:24.1f}{tta}", flush=True)
    finally:
        hosts.close()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(args=vars(args), runs=raw), f, indent=1)


if __name__ == "__main__":
    main()
