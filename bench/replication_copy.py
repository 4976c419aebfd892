#!/usr/bin/env python3
"""How long a new backup's copy takes (docs/replication.md, "A second fault"): a
layerps-scheduler with --replication, 3 layerps-server processes and one worker (this
script) on loopback tcp; the worker declares a dense Adam table of N elements (values and
3 state planes: 16 bytes an element), pushes once, SIGKILLs server rank 1 and pushes
again (answered once the backup took over). The copies the survivors make to their new
backups are read from the servers' logs (LAYERPS_LOG_LEVEL=INFO): how much each queued,
in how long, and when its backup acknowledged it.

  .venv/bin/python bench/replication_copy.py [N (default 2^25)] [--out DIR]
"""
import os, signal, subprocess, sys, time
import numpy as np
import layerps

N = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 1 << 25
out = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else "/tmp/layerps-replication-copy"
os.makedirs(out, exist_ok=True)
HB = ["--heartbeat_interval_ms=200", "--heartbeat_timeout_ms=2000"]
addr = os.path.join(out, "addr")
if os.path.exists(addr): os.remove(addr)
logs = []
def spawn(name, argv):
    f = open(os.path.join(out, name + ".log"), "w"); logs.append(f.name)
    return subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env={**os.environ, "LAYERPS_LOG_LEVEL": "INFO"})
sched = spawn("scheduler", [layerps.tool_path("layerps-scheduler"), "--num_servers=3", "--num_workers=1",
                            "--scheduler=tcp://127.0.0.1:0", f"--address_file={addr}", "--replication", *HB])
while not os.path.exists(addr): time.sleep(0.05)
a = open(addr).read().strip()
servers = [spawn(f"server{r}", [layerps.tool_path("layerps-server"), f"--scheduler={a}", f"--rank={r}", *HB]) for r in range(3)]
w = layerps.Worker(a, heartbeat_interval_ms=200, heartbeat_timeout_ms=2000, request_timeout_ms=120000)
d = w.declare_dense("big", N, rule="adam", lr=0.001)
w.push(d, np.ones(N, np.float32)).wait(timeout=120)
t0 = time.time()
servers[1].send_signal(signal.SIGKILL); servers[1].wait()
g = np.ones(N, np.float32)
w.push(d, g).wait(timeout=120)  # waits for the takeover
t1 = time.time()
time.sleep(3)
w.stop(); sched.wait(timeout=60)
for s in servers: 
    try: s.wait(timeout=30)
    except Exception: s.kill()
print(f"{N} elements (Adam: {N*16/2**20:.0f} MiB of values and state over 3 servers); push after the kill answered {t1-t0:.2f} s after it")
for f in logs:
    for line in open(f):
        if "copying this server" in line or "holds a complete copy" in line or "took over its ranges" in line:
            print(os.path.basename(f), line.strip()[:200])
