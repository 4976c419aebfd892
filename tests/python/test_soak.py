"""The short soak (issue 29 item 4): real daemons (layerps-scheduler with --replication,
two layerps-server processes) and two worker processes train for about 100 s while a
worker is SIGKILLed and restarted, a server is SIGKILLed (its backup takes over), and the
worker is killed and restarted again. At the end every value is checked against the
acknowledged pushes (nothing acknowledged lost), and the long-lived processes' RSS must not
have grown (bench/soak.py --exact; bench/SOAK.md has the 30-minute soak)."""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOAK = os.path.join(HERE, "..", "..", "bench", "soak.py")


def test_short_soak_with_faults_keeps_every_acknowledged_update_and_flat_memory(tmp_path):
    p = subprocess.run([sys.executable, SOAK, "--exact", "--seconds", "100", "--fault_every", "25",
                        "--warmup_s", "15", "--dense", "65536", "--batch", "256", "--step_sleep_s", "0.02",
                        "--sample_s", "2", "--rss_slack_mib", "24", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    print(p.stdout[-4000:])
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert "EXACT OK" in p.stdout
    assert p.stdout.count("SIGKILL worker1") >= 2 and "SIGKILL server1" in p.stdout and "backup took over" in p.stdout
