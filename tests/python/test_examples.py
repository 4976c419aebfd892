"""The examples of examples/python, run as a user would."""

import json
import subprocess
import sys

import numpy as np

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


def test_dlrm_example_trains_under_the_launcher_with_fused_requests(tmp_path):
    """examples/python/dlrm.py under layerps-launch (2 servers, 2 workers, async tables):
    the loss falls, the held-out AUC beats chance, and each worker sends one pull and one
    push per server and step for the 26 tables (4 messages)."""
    out = tmp_path / "dlrm.json"
    p = run_launched(["-s", "2", "-w", "2", "--quiet_daemons", "--timeout_s=300", "--",
                      sys.executable, str(EXAMPLES / "dlrm.py"), "--steps", "40", "--batch", "128",
                      "--max_rows", "5000", "--sync", "async", "--quiet", "--json", str(out)])
    assert p.returncode == 0, p.stdout + p.stderr
    r = json.loads(out.read_text())
    print(f"DLRM: loss {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}, held out log loss {r['logloss']:.4f}, "
          f"AUC {r['auc']:.4f}, {r['messages_to_servers_per_step']:.0f} messages to the servers per step")
    assert np.mean(r["losses"][-5:]) < r["losses"][0]
    assert r["auc"] > 0.52  # better than chance after 40 short steps (async tables: runs vary a little)
    assert r["messages_to_servers_per_step"] == 4


def test_placement_cnn_park_stanza_and_uniform_train_as_one_process(tmp_path):
    """The big-FC-head CNN: park and stanza (the split step), uniform (data parallel
    through the servers) and allreduce (data parallel by the workers' ring) compute the
    same SGD steps as one process, and the bytes the workers count per step are what the
    placement formulas of docs/placement.md say."""
    script = str(EXAMPLES / "placement_cnn.py")
    batch = 32
    common = ["--epochs", "1", "--batch", str(batch), "--limit", "192", "--lr", "0.1", "--seed", "1"]
    local = subprocess.run([sys.executable, script, "--local", "--json", str(tmp_path / "local.json")] + common,
                           capture_output=True, text=True, timeout=300, cwd=str(HERE))
    assert local.returncode == 0, local.stdout + local.stderr
    one = json.loads((tmp_path / "local.json").read_text())["history"][0]
    runs = {}
    for strategy, workers in (("park", 3), ("stanza", 3), ("uniform", 2), ("allreduce", 2)):
        out = str(tmp_path / (strategy + "-{rank}.json"))
        p = run_launched(["-s", "2", "-w", str(workers), "--quiet_daemons", "--timeout_s=300", "--",
                          sys.executable, script, "--strategy", strategy, "--json", out] + common)
        assert p.returncode == 0, p.stdout + p.stderr
        runs[strategy] = [json.loads((tmp_path / f"{strategy}-{r}.json").read_text()) for r in range(workers)]
    for strategy in ("park", "stanza"):
        h = runs[strategy][-1]["history"][0]  # the suffix rank evaluates the whole model
        assert abs(h["loss"] - one["loss"]) <= 1e-4 * abs(one["loss"]), (strategy, h, one)
        assert abs(h["accuracy"] - one["accuracy"]) <= 1e-3, (strategy, h, one)
    for strategy in ("uniform", "allreduce"):
        assert abs(runs[strategy][0]["history"][0]["accuracy"] - one["accuracy"]) <= 1e-3, strategy
    # Bytes per step, payload counted by the two workers that hold the data (W = 2): uniform
    # moves every parameter twice per worker; the split step the conv parameters twice and
    # the activations (and their gradients) of b = 16 samples, plus the 16 labels.
    params = 5_307_274 * 4  # bigfc with one input channel
    prefix = (32 * 1 * 25 + 32 + 64 * 32 * 25 + 64) * 4
    act = (batch // 2) * 4096 * 4
    uniform = sum(r["ps_payload_bytes_per_step"] for r in runs["uniform"])
    assert abs(uniform - 2 * 2 * params) <= 0.02 * uniform
    # The ring of 2 workers: each sends and receives every gradient once, nothing to servers.
    for r in runs["allreduce"]:
        assert r["ps_payload_bytes_per_step"] == 0
        assert abs(r["peer_payload_bytes_per_step"] - 2 * params) <= 0.02 * 2 * params, r
    for strategy in ("park", "stanza"):
        conv = runs[strategy][:2]
        counted = sum(r["ps_payload_bytes_per_step"] + r["peer_payload_bytes_per_step"] for r in conv)
        predicted = 2 * 2 * prefix + 2 * 2 * act
        print(f"{strategy}: {counted / 1e6:.3f} MB counted vs {predicted / 1e6:.3f} MB predicted per step; "
              f"uniform {uniform / 1e6:.3f} MB ({uniform / counted:.1f}x)")
        assert abs(counted - predicted) <= 0.02 * predicted, (strategy, counted, predicted)


def test_placement_cnn_takes_its_cut_and_roles_from_a_stanza_plan(tmp_path):
    """layerps-plan writes a stanza plan with two FC nodes for the example's model (profiled
    from PyTorch); the launcher gives it to the scheduler and the example takes its cut and
    roles from it: 2 conv workers + 2 FC nodes, equal to one process."""
    import torch
    sys.path.insert(0, str(EXAMPLES))
    from placement_cnn import big_fc_cnn
    import layerps
    from layerps.placement import profile
    prof = tmp_path / "bigfc1.json"
    prof.write_text(json.dumps(profile(big_fc_cnn(0), torch.zeros(2, 1, 32, 32), name="bigfc1")))
    plan = tmp_path / "stanza.json"
    p = subprocess.run([layerps.tool_path("layerps-plan"), f"--model={prof}", "--workers=2", "--servers=2",
                        "--batch=16", "--strategy=stanza", "--fc_nodes=2", f"--write_plan={plan}"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert len(json.loads(plan.read_text())["roles"]["fc_nodes"]) == 2
    script = str(EXAMPLES / "placement_cnn.py")
    common = ["--epochs", "1", "--batch", "32", "--limit", "128", "--lr", "0.1", "--seed", "2"]
    local = subprocess.run([sys.executable, script, "--local", "--json", str(tmp_path / "local.json")] + common,
                           capture_output=True, text=True, timeout=300, cwd=str(HERE))
    assert local.returncode == 0, local.stdout + local.stderr
    one = json.loads((tmp_path / "local.json").read_text())["history"][0]
    out = tmp_path / "dist.json"
    p = run_launched(["-s", "2", "-w", "4", "--quiet_daemons", "--timeout_s=300", f"--plan={plan}", "--",
                      sys.executable, script, "--strategy", "stanza", "--plan", str(plan), "--json", str(out)] + common)
    assert p.returncode == 0, p.stdout + p.stderr
    h = json.loads(out.read_text())["history"][0]
    assert abs(h["loss"] - one["loss"]) <= 1e-4 * abs(one["loss"]), (h, one)
    assert abs(h["accuracy"] - one["accuracy"]) <= 1e-3, (h, one)
    # A plan whose roles do not fit the launch is refused with the reason.
    bad = run_launched(["-s", "2", "-w", "3", "--quiet_daemons", "--timeout_s=120", "--",
                        sys.executable, script, "--strategy", "stanza", "--plan", str(plan)] + common)
    assert bad.returncode != 0 and "launch 4 workers" in bad.stdout + bad.stderr


def test_placement_cnn_runs_the_optcnn_strategies_layerps_executes(tmp_path):
    """layerps-plan --strategy=optcnn writes the execution plan of the search's pick (on a
    slow link: conv data-parallel, the FC layers channel-parallel on FC nodes) and of OWT;
    the example runs each through the launcher (2 conv workers + 2 FC nodes) and takes the
    same SGD steps as one process. Model parallelism is refused with its reason (exit 2)."""
    import torch
    sys.path.insert(0, str(EXAMPLES))
    from placement_cnn import big_fc_cnn
    import layerps
    from layerps.placement import profile
    prof = tmp_path / "bigfc1.json"
    prof.write_text(json.dumps(profile(big_fc_cnn(0), torch.zeros(2, 1, 32, 32), name="bigfc1")))
    plan_args = [layerps.tool_path("layerps-plan"), f"--model={prof}", "--workers=2", "--servers=2", "--batch=16",
                 "--bandwidth=100Mbit", "--worker_flops=20e9", "--strategy=optcnn"]
    script = str(EXAMPLES / "placement_cnn.py")
    common = ["--epochs", "1", "--batch", "32", "--limit", "96", "--lr", "0.1", "--seed", "3"]
    local = subprocess.run([sys.executable, script, "--local", "--json", str(tmp_path / "local.json")] + common,
                           capture_output=True, text=True, timeout=300, cwd=str(HERE))
    assert local.returncode == 0, local.stdout + local.stderr
    one = json.loads((tmp_path / "local.json").read_text())["history"][0]
    for run in ("optcnn", "owt"):
        plan = tmp_path / f"{run}.json"
        p = subprocess.run(plan_args + [f"--optcnn_run={run}", f"--write_plan={plan}"],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        written = json.loads(plan.read_text())
        assert written["strategy"] == "stanza" and written["fc_parallel"] == "channel", written["reason"]
        assert written["cut_layer"] == "fc1"
        out = tmp_path / f"{run}-dist.json"
        p = run_launched(["-s", "2", "-w", "4", "--quiet_daemons", "--timeout_s=300", f"--plan={plan}", "--",
                          sys.executable, script, "--plan", str(plan), "--json", str(out)] + common)
        assert p.returncode == 0, p.stdout + p.stderr
        h = json.loads(out.read_text())["history"][0]
        assert abs(h["loss"] - one["loss"]) <= 1e-4 * abs(one["loss"]), (run, h, one)
        assert abs(h["accuracy"] - one["accuracy"]) <= 1e-3, (run, h, one)
    data = tmp_path / "data.json"
    p = subprocess.run(plan_args + ["--optcnn_run=data", f"--write_plan={data}"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and json.loads(data.read_text())["strategy"] == "uniform", p.stderr
    p = subprocess.run(plan_args + ["--optcnn_run=model", f"--write_plan={tmp_path / 'model.json'}"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "beyond the split step" in p.stderr and "LayerwiseTrainer" in p.stderr \
        and "conv1" in p.stderr, p.stderr


def test_layerwise_cnn_runs_a_report_strategy_through_the_launcher(tmp_path):
    """examples/python/layerwise_cnn.py as docs/optcnn.md runs it: the model's profile,
    layerps-plan's optcnn report on 2 devices, the model-parallel strategy (every layer
    split by channel, which the split step cannot run) on 2 workers and no servers, with
    the same losses as one process."""
    import layerps
    script = str(EXAMPLES / "layerwise_cnn.py")
    prof, report = tmp_path / "bigfc.json", tmp_path / "report.json"
    p = subprocess.run([sys.executable, script, "--model", "bigfc", "--write_profile", str(prof)],
                       capture_output=True, text=True, timeout=120, cwd=str(HERE))
    assert p.returncode == 0, p.stderr
    p = subprocess.run([layerps.tool_path("layerps-plan"), f"--model={prof}", "--workers=2", "--servers=1",
                        "--batch=4", "--bandwidth=100Mbit", "--strategy=optcnn", "--json"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    report.write_text(p.stdout)
    common = ["--model", "bigfc", "--batch", "8", "--steps", "3", "--lr", "0.05"]
    local = subprocess.run([sys.executable, script, "--local", "--json", str(tmp_path / "local.json")] + common,
                           capture_output=True, text=True, timeout=120, cwd=str(HERE))
    assert local.returncode == 0, local.stderr
    p = run_launched(["-s", "0", "-w", "2", "--quiet_daemons", "--timeout_s=200", "--", sys.executable, script,
                      "--report", str(report), "--strategy", "model", "--json", str(tmp_path / "lw-{rank}.json")]
                     + common)
    assert p.returncode == 0, p.stdout + p.stderr
    ref = json.loads((tmp_path / "local.json").read_text())["losses"]
    for r in range(2):
        got = json.loads((tmp_path / f"lw-{r}.json").read_text())
        assert got["configs"]["conv1"] == "n1c2h1w1", got["configs"]  # a channel-split convolution
        # Its first step is untimed: its recorded losses are one process's from the second on.
        assert got["losses"][:2] == pytest.approx(ref[1:], rel=1e-4), (got["losses"], ref)


def test_hybrid_lm_modes_train_alike(tmp_path):
    """The hybrid, pure-PS and pure-all-reduce runs of the embedding language model take
    the same steps (same seeds, same global batches) as one process, and learn."""
    script = str(EXAMPLES / "hybrid_lm.py")
    common = ["--steps", "30", "--vocab", "5000", "--dim", "16", "--hidden", "32", "--batch", "128"]
    local = subprocess.run([sys.executable, script, "--local", "--json", str(tmp_path / "local.json")] + common,
                           capture_output=True, text=True, timeout=300, cwd=str(HERE))
    assert local.returncode == 0, local.stdout + local.stderr
    ref = json.loads((tmp_path / "local.json").read_text())
    for mode in ("hybrid", "ps", "allreduce"):
        p = run_launched(["-s", "2", "-w", "2", "--quiet_daemons", "--timeout_s=300", "--",
                          sys.executable, script, "--mode", mode, "--json", str(tmp_path / f"{mode}.json")] + common)
        assert p.returncode == 0, p.stdout + p.stderr
        r = json.loads((tmp_path / f"{mode}.json").read_text())
        print(f"hybrid_lm --mode={mode}: loss {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}, eval {r['eval_loss']:.5f} "
              f"(one process {ref['eval_loss']:.5f}), routes {r['routes']}")
        assert abs(r["eval_loss"] - ref["eval_loss"]) < 1e-4
        assert r["eval_loss"] < ref["losses"][0] - 0.1
        want = {"hybrid": ("ps", "allreduce"), "ps": ("ps", "ps"), "allreduce": ("allreduce", "allreduce")}[mode]
        assert r["routes"]["inp.weight"] == r["routes"]["out.weight"] == want[0]
        assert r["routes"]["mlp.0.weight"] == want[1]


def test_hybrid_lm_tied_embedding_takes_one_process_steps_in_hybrid_and_allgather(tmp_path):
    """--tie: one table looked up by both embedding modules, one parameter with one sparse
    gradient (both lookups' rows): held by the servers in the hybrid, all-gathered in the
    all-gather route, and both runs take one process's steps."""
    script = str(EXAMPLES / "hybrid_lm.py")
    common = ["--tie", "--steps", "20", "--vocab", "4000", "--dim", "16", "--hidden", "32", "--batch", "64"]
    local = subprocess.run([sys.executable, script, "--local", "--json", str(tmp_path / "local.json")] + common,
                           capture_output=True, text=True, timeout=300, cwd=str(HERE))
    assert local.returncode == 0, local.stdout + local.stderr
    ref = json.loads((tmp_path / "local.json").read_text())
    assert ref["sparse_params"] == {"inp.weight": 4000 * 16} and ref["tie"]
    for mode, route in (("hybrid", "ps"), ("allgather", "allgather")):
        p = run_launched(["-s", "2", "-w", "2", "--quiet_daemons", "--timeout_s=300", "--",
                          sys.executable, script, "--mode", mode, "--json", str(tmp_path / f"{mode}.json")] + common)
        assert p.returncode == 0, p.stdout + p.stderr
        r = json.loads((tmp_path / f"{mode}.json").read_text())
        assert "out.weight" not in r["routes"] and r["routes"]["inp.weight"] == route, r["routes"]
        assert abs(r["eval_loss"] - ref["eval_loss"]) < 1e-4, (mode, r["eval_loss"], ref["eval_loss"])
        assert r["eval_loss"] < ref["losses"][0] - 0.05


def test_hybrid_lm_lstm_hybrid_equals_one_process(tmp_path):
    """The recurrent variant: the LSTM's weights go through the all-reduce, the embeddings
    through the servers, and the run takes one process's steps."""
    script = str(EXAMPLES / "hybrid_lm.py")
    common = ["--model", "lstm", "--steps", "20", "--vocab", "3000", "--dim", "16", "--hidden", "32",
              "--batch", "64", "--lr", "0.5"]
    local = subprocess.run([sys.executable, script, "--local", "--json", str(tmp_path / "local.json")] + common,
                           capture_output=True, text=True, timeout=300, cwd=str(HERE))
    assert local.returncode == 0, local.stdout + local.stderr
    ref = json.loads((tmp_path / "local.json").read_text())
    p = run_launched(["-s", "2", "-w", "2", "--quiet_daemons", "--timeout_s=300", "--",
                      sys.executable, script, "--mode", "hybrid", "--json", str(tmp_path / "hybrid.json")] + common)
    assert p.returncode == 0, p.stdout + p.stderr
    r = json.loads((tmp_path / "hybrid.json").read_text())
    assert r["dense_params"] == 4 * 32 * (16 + 32 + 2) + 32 * 16 + 16
    assert r["routes"]["inp.weight"] == r["routes"]["out.weight"] == "ps"
    assert r["routes"]["lstm.weight_hh_l0"] == r["routes"]["proj.weight"] == "allreduce"
    assert abs(r["eval_loss"] - ref["eval_loss"]) < 1e-4, (r["eval_loss"], ref["eval_loss"])
    assert r["eval_loss"] < ref["losses"][0] - 0.05
