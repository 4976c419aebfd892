"""Metrics and timelines of a cluster of real processes under layerps-launch
(docs/observability.md): each node on its own port, valid for promtool, with the job's
counts; each worker's timeline a Chrome trace."""
import json
import re
import shutil
import socket
import subprocess
import sys

import pytest

from conftest import run_launched


def free_port_block(n):
    """A first port such that the n ports from it are free right now."""
    for _ in range(50):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        first = s.getsockname()[1]
        s.close()
        if first + n > 65535:
            continue
        ok = True
        for p in range(first, first + n):
            t = socket.socket()
            try:
                t.bind(("127.0.0.1", p))
            except OSError:
                ok = False
            finally:
                t.close()
        if ok:
            return first
    pytest.skip("no block of free ports")


def value(text, series):
    m = re.search(r"^" + re.escape(series) + r" (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def test_launched_nodes_serve_metrics_and_workers_write_timelines(tmp_path):
    port = free_port_block(5)
    p = run_launched(["-s", "2", "-w", "2", "--quiet_daemons", "--timeout_s=120", "--dense_chunk_elems=100",
                      f"--metrics_port={port}", f"--timeline={tmp_path}/trace-%r.json", "--",
                      sys.executable, "launched_metrics.py"])
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert f"metrics: http://127.0.0.1:{port}/metrics" in p.stdout
    found = {}
    for line in p.stdout.splitlines():
        if "METRICS " in line:
            found.update(json.loads(line.split("METRICS ", 1)[1]))
    assert sorted(found) == ["scheduler", "server0", "server1", "worker0", "worker1"]
    # 2 workers x 4 pushes of a table spread over 2 servers: 8 push requests per server.
    for s in ("server0", "server1"):
        assert value(found[s], 'layerps_server_requests_total{kind="push"}') == 8, found[s]
    assert value(found["scheduler"], "layerps_scheduler_cluster_complete") == 1
    assert value(found["worker0"], 'layerps_worker_request_seconds_count{kind="push"}') == 4
    # Tables are labelled by name in every metric (issue 31 item 6): 4 pushes of 1000 floats,
    # half to each server, and as many pulls back.
    assert value(found["worker0"], 'layerps_table_bytes_total{table="m",direction="sent"}') == 4 * 4000
    assert value(found["server0"], 'layerps_table_bytes_total{table="m",direction="received"}') == 2 * 4 * 2000
    if shutil.which("promtool"):
        for name, text in found.items():
            r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
            assert r.returncode == 0, (name, r.stdout, r.stderr)
    for rank in (0, 1):
        trace = json.loads((tmp_path / f"trace-{rank}.json").read_text())
        pushes = [e for e in trace if e.get("ph") == "X" and e["name"] == "push m"]  # the table's name
        assert len(pushes) == 4 and all(e["pid"] == rank and e["args"]["parts"] == 2 for e in pushes)
