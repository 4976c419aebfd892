"""The short soak: real daemons (layerps-scheduler with --replication and
--scheduler_recovery_ms, three layerps-server processes) and two worker processes train
for about 120 s while, every 20 s: a worker is SIGKILLed and restarted; server rank 1 is
SIGKILLed (its backup takes over); the scheduler is SIGKILLed and a new one started on its
address (it takes the running cluster over); server rank 2 is SIGKILLed (a second server
death: the servers copied their ranges to their new backups after the first); the worker
is killed and restarted again. At the end every value is checked against the
acknowledged pushes (nothing acknowledged lost), and the long-lived processes' RSS must not
have grown (bench/soak.py --exact; bench/SOAK.md has the 30-minute soak)."""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOAK = os.path.join(HERE, "..", "..", "bench", "soak.py")


def test_short_soak_with_faults_keeps_every_acknowledged_update_and_flat_memory(tmp_path):
    p = subprocess.run([sys.executable, SOAK, "--exact", "--servers", "3", "--seconds", "120", "--fault_every", "20",
                        "--warmup_s", "15", "--dense", "65536", "--batch", "256", "--step_sleep_s", "0.02",
                        "--sample_s", "2", "--rss_slack_mib", "24", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    print(p.stdout[-4000:])
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert "EXACT OK" in p.stdout
    assert p.stdout.count("SIGKILL worker1") >= 2 and "SIGKILL server1" in p.stdout and "SIGKILL server2" in p.stdout
    assert "SIGKILL server2 (pid" in p.stdout and p.stdout.count("backup took over") >= 2
    assert "SIGKILL scheduler" in p.stdout  # and soak.py checked the new one took the cluster over
