"""docs/getting-started.md: every block marked `<!-- getting-started: NAME -->` runs as
written from the repository root (tests/getting_started/sandbox.sh: its own network and
mount namespace, node1/node2 as loopback hosts with an sshd), and its output shows what
the page says it does."""
import json
import os
import re
import subprocess

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PAGE = os.path.join(ROOT, "docs", "getting-started.md")
SANDBOX = os.path.join(ROOT, "tests", "getting_started", "sandbox.sh")


def blocks():
    with open(PAGE) as f:
        text = f.read()
    found = dict(re.findall(r"<!-- getting-started: (\w+) -->\s*```sh\n(.*?)```", text, flags=re.S))
    assert set(found) == {"demo", "pytorch", "plan", "hostfile", "prometheus"}, sorted(found)
    return found


def run_block(name, tmp_path, timeout=600):
    script = tmp_path / f"{name}.sh"
    script.write_text(blocks()[name])
    p = subprocess.run(["bash", SANDBOX, ROOT, str(script)], capture_output=True, text=True,
                       timeout=timeout)
    if p.returncode == 77:
        pytest.skip(p.stderr.strip())
    out = p.stdout + p.stderr
    assert p.returncode == 0, f"{name} exited {p.returncode}:\n{out[-4000:]}"
    return out


def accuracies(out, pattern):
    return [float(a) for a in re.findall(pattern, out)]


def test_demo(tmp_path):
    out = run_block("demo", tmp_path)
    acc = accuracies(out, r"done: test accuracy ([0-9.]+)")
    assert len(acc) == 2 and min(acc) >= 0.8, out[-3000:]
    assert re.search(r"^demo: PASSED: .* test accuracy >= 0\.8 ", out, re.M), out[-3000:]


def test_pytorch_script_on_two_workers(tmp_path):
    out = run_block("pytorch", tmp_path)
    acc = accuracies(out, r"final test accuracy ([0-9.]+)")
    assert len(acc) == 2 and min(acc) >= 0.9, out[-3000:]


def test_a_plan_from_layerps_plan_applied_to_alexnet(tmp_path):
    out = run_block("plan", tmp_path)
    # The planner chose park and predicted the busiest NIC's bytes per step; each conv
    # worker counted that many bytes of table payload per step (within 1%).
    row = re.search(r"^\* park\s+(\S+)\s+\S+ \d+\s+([0-9.]+)", out, re.M)
    assert row, out[-3000:]
    cut, predicted = row.group(1), float(row.group(2))
    assert cut == "classifier.1", cut
    with open(os.path.join(ROOT, "run", "plan.json")) as f:
        assert json.load(f)["strategy"] == "park"
    assert "strategy park (plan run/plan.json): cut before 'classifier.1'" in out, out[-3000:]
    counted = [float(x) for x in re.findall(r"per step: ([0-9.]+) MB of table payload to/from the servers", out)]
    conv = [c for c in counted if c > 0]
    assert len(conv) == 2, out[-3000:]
    for c in conv:
        assert abs(c - predicted) <= 0.01 * predicted, (c, predicted)


def test_two_hosts_from_a_hostfile(tmp_path):
    out = run_block("hostfile", tmp_path)
    acc = accuracies(out, r"final test accuracy ([0-9.]+)")
    assert len(acc) == 2 and min(acc) >= 0.9, out[-3000:]
    assert "node1" in out and "node2" in out, out[-3000:]


def test_metrics_scraped_by_prometheus(tmp_path):
    out = run_block("prometheus", tmp_path)
    answers = [json.loads(line) for line in out.splitlines() if line.startswith('{"status"')]
    assert len(answers) == 2, out[-3000:]
    total, up = answers
    assert total["status"] == "success" and up["status"] == "success", answers
    assert float(total["data"]["result"][0]["value"][1]) > 0, total
    targets = {r["metric"]["instance"]: r["value"][1] for r in up["data"]["result"]}
    assert targets == {f"127.0.0.1:{p}": "1" for p in range(9400, 9405)}, targets
