"""The examples of examples/python, run as a user would."""

import json
import subprocess
import sys

import pytest

from conftest import EXAMPLES, HERE, run_launched

EPOCHS = 10
BATCH = 64
SEED = 0


@pytest.mark.parametrize("mode,lr", [("aggregate", 0.05), ("server", 0.2)])
def test_digits_cnn_with_two_workers_matches_one_process(tmp_path, mode, lr):
    script = str(EXAMPLES / "digits_cnn.py")
    common = ["--epochs", str(EPOCHS), "--batch", str(BATCH), "--seed", str(SEED), "--mode", mode,
              "--lr", str(lr)]
    local = subprocess.run([sys.executable, script, "--local", "--json", str(tmp_path / "local.json")] + common,
                           capture_output=True, text=True, timeout=300, cwd=str(HERE))
    assert local.returncode == 0, local.stdout + local.stderr
    dist = run_launched(["-s", "2", "-w", "2", "--quiet_daemons", "--timeout_s=300", "--",
                         sys.executable, script, "--json", str(tmp_path / "dist.json")] + common)
    assert dist.returncode == 0, dist.stdout + dist.stderr
    one = json.loads((tmp_path / "local.json").read_text())
    two = json.loads((tmp_path / "dist.json").read_text())
    print(f"digits CNN ({mode} mode, SGD lr {lr}), {EPOCHS} epochs, global batch {BATCH}, seed {SEED}:")
    print(f"  one process:                      test accuracy {one['test_accuracy']:.4f} "
          f"({one['seconds_per_epoch']:.3f} s/epoch)")
    print(f"  LayerPS, 2 workers and 2 servers: test accuracy {two['test_accuracy']:.4f} "
          f"({two['seconds_per_epoch']:.3f} s/epoch)")
    assert two["workers"] == 2 and two["weights_equal_across_workers"]
    assert one["test_accuracy"] > 0.9
    assert abs(one["test_accuracy"] - two["test_accuracy"]) <= 0.01


def test_ctr_embedding_loss_falls_and_rows_match(tmp_path):
    out = tmp_path / "ctr.json"
    p = run_launched(["-s", "2", "-w", "2", "--quiet_daemons", "--timeout_s=300", "--",
                      sys.executable, str(EXAMPLES / "ctr_embedding.py"), "--json", str(out)])
    assert p.returncode == 0, p.stdout + p.stderr
    r = json.loads(out.read_text())
    print(f"CTR model: loss {r['first_loss']:.4f} -> {r['last_loss']:.4f}; rows pulled {r['rows_pulled']} "
          f"for {r['ids_seen']} ids looked up; pulled rows equal the servers': {r['rows_match']}")
    assert r["last_loss"] < r["first_loss"] - 0.1
    assert r["rows_match"]
    assert r["rows_pulled"] < r["ids_seen"]  # only unique rows travel
