"""Metrics and timelines of a cluster of real processes under layerps-launch
(docs/observability.md): each node on its own port, valid for promtool, with the job's
counts; each worker's timeline a Chrome trace."""
import json
import re
import shutil
import subprocess
import sys

import pytest

from conftest import free_ports, run_launched


def value(text, series):
    m = re.search(r"^" + re.escape(series) + r" (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def test_launched_nodes_serve_metrics_and_workers_write_timelines(tmp_path):
    port = free_ports(5)
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


def test_a_server_waiting_for_the_cluster_serves_metrics_and_says_what_is_missing():
    """A server started by hand before its peers answers /metrics at once (joined 0)
    and logs every 10 s which ranks the cluster still lacks."""
    import os
    import time
    import urllib.request
    import layerps
    first = free_ports(2)
    sched_port, metrics_port = first, first + 1
    env = dict(os.environ, LAYERPS_LOG_LEVEL="INFO", LAYERPS_CONNECT_TIMEOUT_MS="120000")
    address = f"tcp://127.0.0.1:{sched_port}"
    sched = subprocess.Popen([layerps.tool_path("layerps-scheduler"), f"--scheduler={address}",
                              "--num_servers=2", "--num_workers=1"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = subprocess.Popen([layerps.tool_path("layerps-server"), f"--scheduler={address}",
                               "--bind=tcp://127.0.0.1:0", f"--metrics_port={metrics_port}"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        text, deadline = None, time.monotonic() + 30
        while text is None and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:
                    text = r.read().decode()
            except OSError:
                time.sleep(0.2)
        assert text is not None, "the waiting server's /metrics never answered"
        assert value(text, "layerps_server_joined") == 0, text
        assert value(text, 'layerps_server_requests_total{kind="push"}') == 0, text
        # The first report comes 10 s after the start; the line names the missing ranks.
        deadline, seen = time.monotonic() + 60, []
        while time.monotonic() < deadline:
            line = server.stderr.readline()
            if not line:
                break
            seen.append(line)
            if "waiting for the cluster" in line:
                assert "server rank 0 (node" in line, line
                assert "missing server rank 1 and worker rank 0" in line, line
                assert "1 of 2 servers and 0 of 1 workers registered" in line, line
                break
        else:
            pytest.fail("no waiting report within 60 s:\n" + "".join(seen[-20:]))
        assert any("waiting for the cluster" in l for l in seen), "".join(seen[-20:])
    finally:
        for p in (server, sched):
            p.kill()
            p.wait(timeout=30)
