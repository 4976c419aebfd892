#!/usr/bin/env python3
"""DLRM through LayerPS against TorchRec, side by side in one run (bench/RECSYS.md).

Both train examples/python/criteo_synth.py's data (the same samples) with the same DLRM
(13 dense, 26 tables of dim 16, bottom 512-256-64-16, top 512-256-1), row-wise Adagrad on
the tables (lr 0.05, eps 1e-8) and Adagrad on the MLPs (lr 0.01), batch per worker
--batch, on the torch of .venv-torchrec (bench/torchrec_env.sh; LayerPS's wheel is
installed there too, so both use the same torch and BLAS):

  torchrec        bench/torchrec_dlrm.py: DistributedModelParallel over gloo, W processes
  layerps         examples/python/dlrm.py under layerps.launch: W workers and --servers
                  servers, tables in one EmbeddingBagCollection (bsp: exact, every worker's
                  push of a step applied at once), MLPs all-reduced
  layerps-async   the same with async tables (fused: one pull and one push per server and step)
  layerps-separate  async, one lt.EmbeddingBag per table (26 requests per server and step)

Every run is in a network namespace of its own, so the loopback's bytes are the job's.
Runs alternate (W, repeat, system in turn). Per run: samples/s over the timed steps,
loopback bytes per step, messages to the servers per step (LayerPS), peak RSS of every
process (workers from getrusage; LayerPS's servers and scheduler polled from /proc),
held-out log loss and AUC. Raw output: --out DIR (one JSON per run and the table).

    python3 bench/recsys_compare.py --worlds 2,4 --repeats 3 --out bench/results/recsys-DATE
    python3 bench/recsys_compare.py --sweep 100000,1000000,10000000,100000000 --capacity 20000
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = os.path.join(ROOT, ".venv-torchrec", "bin", "python")


def hwm_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _ppid(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _descends(pid, root):
    for _ in range(64):
        if pid == root:
            return True
        if pid <= 1:
            return False
        pid = _ppid(pid)
    return False


class PeakRss:
    """Polls the peak RSS (VmHWM) of every process below `root` (the run's own processes:
    nothing else on the machine) whose command line names one of `names`, until stopped;
    max per pid."""

    def __init__(self, names, root):
        self.names, self.root, self.peak, self._stop = names, root, {}, threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop.is_set():
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                name = next((n for n in self.names if n in cmd), None)
                if name and _descends(int(pid), self.root):
                    h = hwm_kib(pid)
                    if h:
                        key = (name, int(pid))
                        self.peak[key] = max(self.peak.get(key, 0), h)
            self._stop.wait(0.3)

    def stop(self):
        self._stop.set()
        self._t.join()
        return self.peak


def netns(cmd):
    return ["unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$@"', "sh"] + cmd


def run_layerps(args, world, kind, out_json, rows=None, capacity=0):
    sync = "bsp" if kind == "layerps" else "async"
    tables = "separate" if kind == "layerps-separate" else "fused"
    extra = []
    if rows:
        # Every feature given `rows` ids, uncapped (--max_rows would cap them: 0 is none).
        extra = [f"--uniform_rows={rows}", f"--capacity={capacity}", "--max_rows=0"]
    cmd = netns([PY, "-m", "layerps.launch", "-s", str(args.servers), "-w", str(world), "--",
                 PY, os.path.join(ROOT, "examples", "python", "dlrm.py"),
                 f"--steps={args.steps + args.warmup}", f"--warmup={args.warmup}", f"--batch={args.batch}",
                 f"--max_rows={args.max_rows}", "--dense_lr=0.01", "--lr=0.05", f"--sync={sync}",
                 f"--tables={tables}", "--quiet", f"--eval_samples={args.eval_samples}",
                 f"--json={out_json}"] + extra)
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rss = PeakRss(["layerps-server", "layerps-scheduler", "examples/python/dlrm.py"], p.pid)
    out, err = p.communicate(timeout=1800)
    wall = time.time() - t0
    peak = rss.stop()
    if p.returncode != 0:
        raise RuntimeError(f"{kind} W={world} failed ({p.returncode}):\n{out[-3000:]}\n{err[-3000:]}")
    d = json.load(open(out_json))
    servers = sorted(v for (n, _), v in peak.items() if n == "layerps-server")
    return {"system": kind, "world": world, "samples_per_s": d["samples_per_s"],
            "wire_bytes_per_step": d["lo_tx_bytes_per_step"],
            "messages_to_servers_per_step": d["messages_to_servers_per_step"],
            "worker_peak_rss_mib": [r / 1024 for r in d["worker_maxrss_kib"]],
            "server_peak_rss_mib": [r / 1024 for r in servers],
            "scheduler_peak_rss_mib": [v / 1024 for (n, _), v in peak.items() if n == "layerps-scheduler"],
            "logloss": d["logloss"], "auc": d["auc"], "wall_s": wall, "uniform_rows": rows}


def run_torchrec(args, world, out_json):
    cmd = [PY, os.path.join(ROOT, "bench", "torchrec_dlrm.py"), f"--world={world}", f"--steps={args.steps}",
           f"--warmup={args.warmup}", f"--batch={args.batch}", f"--max_rows={args.max_rows}", "--seed=0",
           "--dense_lr=0.01", "--emb_lr=0.05", f"--eval_samples={args.eval_samples}", f"--json={out_json}"]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    wall = time.time() - t0
    if p.returncode != 0:
        raise RuntimeError(f"torchrec W={world} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    d = json.load(open(out_json))
    return {"system": "torchrec", "world": world, "samples_per_s": d["samples_per_s"],
            "wire_bytes_per_step": d["wire_bytes_per_step"], "messages_to_servers_per_step": None,
            "worker_peak_rss_mib": list(d["peak_rss_mib"]), "server_peak_rss_mib": [],
            "scheduler_peak_rss_mib": [], "logloss": d["eval_after"]["logloss"], "auc": d["eval_after"]["auc"],
            "wall_s": wall, "uniform_rows": None}


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def main():
    global PY
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worlds", default="2,4", help="worker counts (default 2,4)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--systems", default="torchrec,layerps,layerps-async,layerps-separate")
    ap.add_argument("--servers", type=int, default=2, help="LayerPS servers (default 2)")
    ap.add_argument("--steps", type=int, default=30, help="timed steps (default 30)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--batch", type=int, default=256, help="samples per worker and step")
    ap.add_argument("--max_rows", type=int, default=100000)
    ap.add_argument("--eval_samples", type=int, default=8192)
    ap.add_argument("--sweep", default="", help="instead: LayerPS (async, W=2) with every feature "
                    "given each of these many ids, tables bounded by --capacity")
    ap.add_argument("--capacity", default="20000",
                    help="--sweep: rows per table per server, or several (comma-separated; 0: unbounded)")
    ap.add_argument("--out", required=True, help="directory for the raw JSON and the table")
    ap.add_argument("--python", default=PY,
                    help="the interpreter that runs both systems (default .venv-torchrec's; --sweep runs "
                         "LayerPS only, so any venv with the layerps package will do)")
    args = ap.parse_args()
    PY = args.python
    if not os.path.exists(PY):
        sys.exit(f"recsys_compare.py: no {PY}: run bench/torchrec_env.sh first (or pass --python)")
    if os.geteuid() != 0 or not shutil.which("unshare"):
        sys.exit("recsys_compare.py: needs root and unshare (a network namespace per run)")
    os.makedirs(args.out, exist_ok=True)
    results = []
    n = 0

    def record(r, path):
        results.append(r)
        json.dump(r, open(path.replace(".json", ".result.json"), "w"), indent=1)
        print(f"{r['system']:17s} W={r['world']} rows={r['uniform_rows']}: {r['samples_per_s']:8.0f} samples/s, "
              f"{r['wire_bytes_per_step'] / 1e6:6.2f} MB/step, msgs/step {r['messages_to_servers_per_step']}, "
              f"peak RSS workers {max(r['worker_peak_rss_mib']):.0f} MiB, servers "
              f"{max(r['server_peak_rss_mib'], default=0):.0f} MiB; log loss {r['logloss']:.4f}, AUC {r['auc']:.4f}",
              flush=True)

    if args.sweep:
        # Every size with every bound (0: unbounded), interleaved.
        for rows in [int(x) for x in args.sweep.split(",")]:
            for cap in [int(c) for c in str(args.capacity).split(",")]:
                n += 1
                path = os.path.join(args.out, f"{n:02d}-sweep-{rows}-cap{cap}.json")
                r = run_layerps(args, 2, "layerps-async", path, rows=rows, capacity=cap)
                r["capacity"] = cap
                r["system"] = f"layerps-async, {cap} rows/table/server" if cap else "layerps-async, unbounded"
                record(r, path)
    else:
        systems = args.systems.split(",")
        for rep in range(args.repeats):
            for world in [int(w) for w in args.worlds.split(",")]:
                order = systems if rep % 2 == 0 else list(reversed(systems))
                for kind in order:
                    n += 1
                    path = os.path.join(args.out, f"{n:02d}-{kind}-w{world}-r{rep}.json")
                    r = (run_torchrec(args, world, path) if kind == "torchrec"
                         else run_layerps(args, world, kind, path))
                    r["repeat"] = rep
                    record(r, path)
    lines = [f"# {' '.join(sys.argv)}", f"# {os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M')}", "",
             "| system | W | rows | samples/s (median; runs) | wire MB/step | msgs to servers/step | "
             "peak RSS per worker MiB | per server MiB | log loss | AUC |", "|---|---|---|---|---|---|---|---|---|---|"]
    keys = sorted({(r["system"], r["world"], r["uniform_rows"] or 0) for r in results},
                  key=lambda k: (k[1], k[2], k[0]))
    for system, world, rows in keys:
        rs = [r for r in results if (r["system"], r["world"], r["uniform_rows"] or 0) == (system, world, rows)]
        sps = [r["samples_per_s"] for r in rs]
        msgs = rs[0]["messages_to_servers_per_step"]
        lines.append(f"| {system} | {world} | {rows or '-'} | {median(sps):.0f} ({', '.join(f'{x:.0f}' for x in sps)}) | "
                     f"{median([r['wire_bytes_per_step'] for r in rs]) / 1e6:.2f} | {'-' if msgs is None else f'{msgs:.0f}'} | "
                     f"{max(max(r['worker_peak_rss_mib']) for r in rs):.0f} | "
                     f"{max((max(r['server_peak_rss_mib'], default=0) for r in rs)):.0f} | "
                     f"{rs[0]['logloss']:.4f} | {rs[0]['auc']:.4f} |")
    text = "\n".join(lines)
    print(text)
    open(os.path.join(args.out, "table.md"), "w").write(text + "\n")


if __name__ == "__main__":
    main()
