"""The split training step of layer placement (Park's PS worker, Stanza's FC node): the
same losses and weights as data-parallel SGD on the global batch, and the bytes it moves."""

import collections
import copy
import json
import subprocess

import numpy as np
import pytest
import torch

import layerps
from layerps.placement import SplitTrainer, profile, split_sequential
from conftest import FAST, run_parallel

STEPS = 100
BATCH = 8
LR = 0.2


def small_cnn():
    torch.manual_seed(0)
    return torch.nn.Sequential(collections.OrderedDict([
        ("conv", torch.nn.Conv2d(1, 4, 3)),
        ("relu1", torch.nn.ReLU()),
        ("flat", torch.nn.Flatten()),
        ("fc1", torch.nn.Linear(4 * 6 * 6, 32)),
        ("relu2", torch.nn.ReLU()),
        ("fc2", torch.nn.Linear(32, 10)),
    ]))


def batches(workers):
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(STEPS):
        step = []
        for _ in range(workers):
            x = torch.randn(BATCH, 1, 8, 8, generator=g)
            # A rule the model can learn: two bits of the input decide among 4 classes.
            y = (x.mean(dim=(1, 2, 3)) > 0).long() * 2 + (x[:, 0, :4, :4].mean(dim=(1, 2)) > 0).long()
            step.append((x, y))
        out.append(step)
    return out


def reference(model, data):
    """Data-parallel SGD on the global batch, in one process."""
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for step in data:
        x = torch.cat([b[0] for b in step])
        y = torch.cat([b[1] for b in step])
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses


def test_split_step_equals_data_parallel_sgd_and_counts_its_bytes():
    base = small_cnn()
    data = batches(2)
    ref_model = copy.deepcopy(base)
    ref_losses = reference(ref_model, data)
    models = [copy.deepcopy(base) for _ in range(3)]
    example = torch.zeros(BATCH, 1, 8, 8)
    with layerps.LocalCluster(num_servers=1, num_workers=3, transport="inproc", **FAST) as c:
        def role(w):
            t = SplitTrainer(w, models[w.rank], "fc1", torch.nn.functional.cross_entropy, lr=LR,
                             conv_workers=[0, 1], suffix_rank=2, batch=BATCH, example_input=example)
            losses = [t.step(*(data[s][w.rank] if w.rank < 2 else (None, None))) for s in range(STEPS)]
            prefix = t.prefix_parameters() if w.rank == 0 else None
            return losses, prefix, t.suffix if w.rank == 2 else None

        results = run_parallel(role, [(w,) for w in c.workers], timeout=120)
        losses = results[2][0]
        assert len(losses) == STEPS
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
        assert losses[-1] < losses[0]
        ref_prefix, ref_suffix = split_sequential(ref_model, "fc1")
        for got, want in zip(results[0][1], ref_prefix.parameters()):
            np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)
        for got, want in zip(results[2][2].parameters(), ref_suffix.parameters()):
            np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)

        # Bytes: each conv worker sends its activations (float32) and labels (int64) to the
        # suffix rank and gets the activation gradients back, in three all-to-alls among the
        # three ranks, each agreed with a 96-byte descriptor to every other member
        # (docs/collectives.md); only the prefix's parameters meet the servers.
        act_bytes = BATCH * 4 * 6 * 6 * 4
        descriptors = 3 * 96
        suffix_id = c.workers[2].id
        for w in c.workers[:2]:
            t = w.traffic()
            to_suffix = t["peers"][suffix_id]
            payload_sent = to_suffix["bytes_sent"] - 64 * to_suffix["messages_sent"]
            payload_received = to_suffix["bytes_received"] - 64 * to_suffix["messages_received"]
            assert payload_sent == STEPS * (act_bytes + BATCH * 8 + descriptors)
            assert payload_received == STEPS * (act_bytes + descriptors)
            prefix_bytes = sum(p.numel() * 4 for p in base.conv.parameters())
            ps_tables = sum(v["bytes_sent"] for v in t["tables"].values())
            assert ps_tables == STEPS * prefix_bytes + (prefix_bytes if w.rank == 0 else 0)  # + the initial assign
        assert c.workers[2].traffic()["tables"] == {}  # the suffix never touches the servers


def test_split_trainer_refuses_bad_roles():
    with layerps.LocalCluster(num_servers=1, num_workers=1, transport="inproc", **FAST) as c:
        w = c.workers[0]
        with pytest.raises(layerps.InvalidArgumentError, match="no role"):
            SplitTrainer(w, small_cnn(), "fc1", torch.nn.functional.cross_entropy, lr=LR,
                         conv_workers=[1], suffix_rank=2, batch=BATCH, example_input=torch.zeros(BATCH, 1, 8, 8))
    with pytest.raises(layerps.InvalidArgumentError, match="no layer 'fc9'"):
        split_sequential(small_cnn(), "fc9")


def test_profile_of_a_torch_model_is_read_by_layerps_plan(tmp_path):
    p = profile(small_cnn(), torch.zeros(2, 1, 8, 8), name="small")
    assert [l["name"] for l in p["layers"]] == ["conv", "relu1", "flat", "fc1", "relu2", "fc2"]
    assert p["layers"][0]["param_bytes"] == (4 * 9 + 4) * 4
    assert p["layers"][3]["param_bytes"] == (144 * 32 + 32) * 4
    assert p["layers"][3]["shape"]["in_channels"] == 144
    assert p["layers"][2]["activation_bytes"] == 144 * 4
    f = tmp_path / "small.json"
    f.write_text(json.dumps(p))
    out = subprocess.run([layerps.tool_path("layerps-plan"), f"--model={f}", "--workers=2", "--servers=1",
                          "--batch=8", "--strategy=park", "--cut=fc1"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "fc1" in out.stdout


FAULT_SCRIPT = r'''
import os, signal, sys, time
sys.path.insert(0, sys.argv[1])
import torch
import layerps
from layerps.placement import SplitTrainer
from test_split import small_cnn, batches, BATCH, LR

w = layerps.init()
t = SplitTrainer(w, small_cnn(), "fc1", torch.nn.functional.cross_entropy, lr=LR, conv_workers=[0, 1],
                 suffix_rank=2, batch=BATCH, example_input=torch.zeros(BATCH, 1, 8, 8), timeout=60)
data = batches(2)
last = time.time()
for s in range(20):
    if w.rank == 2 and s == 5:
        os.kill(os.getpid(), signal.SIGKILL)  # the FC node dies in the middle of training
    try:
        t.step(*(data[s][w.rank] if w.rank < 2 else (None, None)))
    except layerps.UnavailableError as e:
        print(f"conv worker {w.rank}: UnavailableError {time.time() - last:.2f} s after its last step: {e}",
              flush=True)
        sys.exit(4)
    last = time.time()
print(f"rank {w.rank}: finished without noticing", flush=True)
'''


def test_a_killed_fc_node_fails_the_conv_workers_within_the_heartbeat_timeout(tmp_path):
    """Real daemons and three worker processes; the FC node SIGKILLs itself at step 5: the
    scheduler declares it dead and both conv workers' requests fail with UnavailableError
    within the heartbeat timeout (1 s here), not the 60 s request timeout."""
    import os
    import subprocess
    import sys
    import time
    from conftest import HERE
    script = tmp_path / "fault.py"
    script.write_text(FAULT_SCRIPT)
    addr_file = tmp_path / "addr"
    beat = ["--heartbeat_interval_ms=100", "--heartbeat_timeout_ms=1000"]
    daemons = [subprocess.Popen([layerps.tool_path("layerps-scheduler"), "--scheduler=tcp://127.0.0.1:0",
                                 "--num_servers=1", "--num_workers=3", f"--address_file={addr_file}",
                                 "--run_timeout_s=120"] + beat, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        for _ in range(100):
            if addr_file.exists() and addr_file.read_text().strip():
                break
            time.sleep(0.1)
        addr = addr_file.read_text().strip()
        daemons.append(subprocess.Popen([layerps.tool_path("layerps-server"), f"--scheduler={addr}"] + beat,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        env = dict(os.environ, LAYERPS_SCHEDULER=addr, LAYERPS_HEARTBEAT_INTERVAL_MS="100",
                   LAYERPS_HEARTBEAT_TIMEOUT_MS="1000", GLOG_minloglevel="2")
        workers = [subprocess.Popen([sys.executable, str(script), str(HERE)], env=dict(env, LAYERPS_RANK=str(r)),
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(3)]
        outs = [w.communicate(timeout=120)[0] for w in workers]
    finally:
        for d in daemons:
            d.kill()
            d.wait()
    # Whichever process got rank 2 is the FC node and died of SIGKILL; the two conv workers
    # noticed (exit 4).
    codes = sorted(w.returncode for w in workers)
    assert codes == [-9, 4, 4], "\n".join(outs)
    for w, out in zip(workers, outs):
        if w.returncode != 4:
            continue
        line = [l for l in out.splitlines() if "UnavailableError" in l][0]
        seconds = float(line.split("UnavailableError ")[1].split(" s after")[0])
        assert seconds < 10.0, line


PLAN_SCRIPT = r'''
import sys
import layerps
w = layerps.init()
placement = w.placement()
fc = w.declare_dense("fc1.weight", 1000, layer="fc1")
conv = w.declare_dense("conv.weight", 1000, layer="conv")
print(f"rank {w.rank}: placement {sorted(placement.items())}; fc1 on {w.table_servers(fc)}; "
      f"conv on {sorted(set(w.table_servers(conv)))}", flush=True)
layerps.shutdown()
'''


def test_a_plan_from_layerps_plan_is_put_in_force_by_the_launcher(tmp_path):
    """layerps-plan writes a park plan for a profiled PyTorch model; layerps.launch --plan
    gives it to the scheduler, and the workers' tables land where the plan says."""
    import subprocess
    import sys
    from conftest import run_launched
    prof = tmp_path / "small.json"
    prof.write_text(json.dumps(profile(small_cnn(), torch.zeros(2, 1, 8, 8), name="small")))
    plan = tmp_path / "plan.json"
    p = subprocess.run([layerps.tool_path("layerps-plan"), f"--model={prof}", "--workers=2", "--servers=2",
                        "--batch=8", "--strategy=park", "--cut=fc1", f"--write_plan={plan}"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    layers = {l["layer"]: l["servers"] for l in json.loads(plan.read_text())["layers"]}
    assert layers["fc1"] == [1] and layers["conv"] == [0], layers  # the suffix on the dedicated server
    script = tmp_path / "plan_worker.py"
    script.write_text(PLAN_SCRIPT)
    p = run_launched(["-s", "2", "-w", "2", "--quiet_daemons", "--timeout_s=120", f"--plan={plan}", "--",
                      sys.executable, str(script)])
    assert p.returncode == 0, p.stdout + p.stderr
    for r in range(2):
        assert f"rank {r}: placement [" in p.stdout, p.stdout
        assert f"rank {r}: placement" in p.stdout and "fc1 on [1]; conv on [0]" in p.stdout, p.stdout
    bad = run_launched(["-s", "2", "-w", "2", f"--plan={tmp_path / 'missing.json'}", "--", sys.executable, "-c", "0"])
    assert bad.returncode == 2 and "cannot read --plan" in bad.stderr + bad.stdout


def test_two_fc_nodes_stay_replicas_and_equal_data_parallel_sgd():
    """Stanza with N_f = 2: conv worker k sends to FC node k % 2; the FC replicas all-reduce
    their gradients, stay equal, and the training equals data-parallel SGD."""
    steps = 40
    base = small_cnn()
    data = batches(2)[:steps]
    ref_model = copy.deepcopy(base)
    ref_losses = reference(ref_model, data)
    models = [copy.deepcopy(base) for _ in range(4)]
    example = torch.zeros(BATCH, 1, 8, 8)
    with layerps.LocalCluster(num_servers=1, num_workers=4, transport="inproc", **FAST) as c:
        def role(w):
            t = SplitTrainer(w, models[w.rank], "fc1", torch.nn.functional.cross_entropy, lr=LR,
                             conv_workers=[0, 1], suffix_ranks=[2, 3], batch=BATCH, example_input=example)
            losses = [t.step(*(data[s][w.rank] if w.rank < 2 else (None, None))) for s in range(steps)]
            return losses, t.suffix if w.rank >= 2 else None

        results = run_parallel(role, [(w,) for w in c.workers], timeout=120)
    np.testing.assert_allclose(results[2][0], ref_losses, rtol=1e-5)
    assert results[2][0] == results[3][0]  # both replicas report the global loss
    _, ref_suffix = split_sequential(ref_model, "fc1")
    for a, b, want in zip(results[2][1].parameters(), results[3][1].parameters(), ref_suffix.parameters()):
        assert torch.equal(a, b)  # replicas identical
        np.testing.assert_allclose(a.detach().numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fc_nodes,degrees", [(2, None), (3, None), (2, {"fc2": 1}), (2, {"fc2": "replica"})])
def test_channel_parallel_fc_nodes_split_the_weights_and_equal_data_parallel_sgd(fc_nodes, degrees):
    """Model-parallel FC layers (OptCNN's channel-parallel configuration): FC node j holds
    rows [j*out/N, (j+1)*out/N) of every linear layer; the training equals data-parallel SGD
    and the assembled suffix equals the reference's. Bytes: every conv worker sends its
    activations to every FC node; each FC node receives the other nodes' output columns."""
    steps = 30
    torch.manual_seed(0)
    base = torch.nn.Sequential(collections.OrderedDict([
        ("conv", torch.nn.Conv2d(1, 4, 3)), ("relu1", torch.nn.ReLU()), ("flat", torch.nn.Flatten()),
        ("fc1", torch.nn.Linear(4 * 6 * 6, 36)), ("relu2", torch.nn.ReLU()), ("fc2", torch.nn.Linear(36, 12)),
    ]))
    g = torch.Generator().manual_seed(1)
    data = [[(torch.randn(BATCH, 1, 8, 8, generator=g), torch.randint(0, 12, (BATCH,), generator=g))
             for _ in range(2)] for _ in range(steps)]
    ref_model = copy.deepcopy(base)
    ref_losses = reference(ref_model, data)
    n = 2 + fc_nodes
    models = [copy.deepcopy(base) for _ in range(n)]
    example = torch.zeros(BATCH, 1, 8, 8)
    fc = list(range(2, n))
    with layerps.LocalCluster(num_servers=1, num_workers=n, transport="inproc", **FAST) as c:
        def role(w):
            t = SplitTrainer(w, models[w.rank], "fc1", torch.nn.functional.cross_entropy, lr=LR,
                             conv_workers=[0, 1], suffix_ranks=fc, batch=BATCH, example_input=example,
                             suffix_parallel="channel", channel_degrees=degrees)
            losses = [t.step(*(data[s][w.rank] if w.rank < 2 else (None, None))) for s in range(steps)]
            shard_rows = {k: v[0].shape[0] for k, v in t.shards.items()} if w.rank >= 2 else None
            whole = t.gather_suffix() if w.rank >= 2 else None
            return losses, shard_rows, whole

        results = run_parallel(role, [(w,) for w in c.workers], timeout=120)
        _, ref_suffix = split_sequential(ref_model, "fc1")
        for r in fc:
            np.testing.assert_allclose(results[r][0], ref_losses, rtol=1e-4)
            k2 = (degrees or {}).get("fc2", fc_nodes)
            want_rows = {"fc1": 36 // fc_nodes}
            if k2 == "replica":
                want_rows["fc2"] = 12
            elif r - 2 < k2:
                want_rows["fc2"] = 12 // k2
            assert results[r][1] == want_rows  # its rows only: no weight is replicated
            for got, want in zip(results[r][2].parameters(), ref_suffix.parameters()):
                np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-5)
        act_bytes = BATCH * 4 * 6 * 6 * 4
        for w in c.workers[:2]:
            peers = w.traffic()["peers"]
            sent = sum(peers[c.workers[r].id]["bytes_sent"] - 64 * peers[c.workers[r].id]["messages_sent"]
                       for r in fc)
            # activations (float32) and labels (int64) in three all-to-alls, each agreed
            # with a 96-byte descriptor (docs/collectives.md)
            assert sent == steps * fc_nodes * (act_bytes + BATCH * 8 + 3 * 96)
        # The last FC node receives, per step and linear layer, the other holders' output
        # columns, then the input gradients' all-reduce.
        peers = c.workers[fc[-1]].traffic()["peers"]
        from_fc = sum(peers[c.workers[r].id]["bytes_received"] - 64 * peers[c.workers[r].id]["messages_received"]
                      for r in fc[:-1])
        if degrees:
            return
        # Per step: the others' columns of fc1's and fc2's outputs (forward), the others' parts
        # of its own block of fc2's input gradient, and of the rows of the conv workers it
        # serves (backward); at the end gather_suffix's weight rows. Each collective among
        # the FC nodes (per step two all-gathers and two all-to-alls, at the end four
        # all-gathers) and each of the step's three all-to-alls among all the ranks is
        # agreed with a 96-byte descriptor from every other FC node.
        n, last = fc_nodes, fc_nodes - 1
        served = sum(1 for k in range(2) if k % n == last)
        per_step = (n - 1) * 2 * BATCH * (36 + 12) // n + (n - 1) * 2 * BATCH * 36 // n + (n - 1) * BATCH * 144 * served
        weights = (n - 1) * (36 * 144 + 36 + 12 * 36 + 12) // n
        descriptors = 96 * (n - 1) * (7 * steps + 4)
        assert from_fc == 4 * (steps * per_step + weights) + descriptors, (from_fc, steps * per_step * 4, weights * 4)
    with pytest.raises(layerps.InvalidArgumentError, match="not divisible by the 5 FC nodes"):
        with layerps.LocalCluster(num_servers=1, num_workers=7, transport="inproc", **FAST) as c:
            SplitTrainer(c.workers[0], copy.deepcopy(base), "fc1", torch.nn.functional.cross_entropy, lr=LR,
                         conv_workers=[0, 1], suffix_ranks=[2, 3, 4, 5, 6], batch=BATCH, example_input=example,
                         suffix_parallel="channel")


class TorchvisionStyleNet(torch.nn.Module):
    """Shaped like torchvision's VGG and AlexNet: features, an adaptive pool, flatten in
    forward() (not a module), then a classifier; not an nn.Sequential."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.features = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU())
        self.avgpool = torch.nn.AdaptiveAvgPool2d((3, 3))
        self.classifier = torch.nn.Sequential(torch.nn.Linear(4 * 3 * 3, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))

    def forward(self, x):
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def test_split_trainer_takes_a_model_that_is_not_sequential():
    """Issue 28 item 2: cut at torchvision's 'classifier.0' through torch.fx; two conv
    workers and a suffix rank equal data-parallel SGD in one process."""
    base = TorchvisionStyleNet()
    data = batches(2)[:30]
    ref_model = copy.deepcopy(base)
    ref_losses = reference(ref_model, data)
    models = [copy.deepcopy(base) for _ in range(3)]
    example = torch.zeros(BATCH, 1, 8, 8)
    with layerps.LocalCluster(num_servers=1, num_workers=3, transport="inproc", **FAST) as c:
        def role(w):
            t = SplitTrainer(w, models[w.rank], "classifier.0", torch.nn.functional.cross_entropy, lr=LR,
                             conv_workers=[0, 1], suffix_rank=2, batch=BATCH, example_input=example)
            losses = [t.step(*(data[s][w.rank] if w.rank < 2 else (None, None))) for s in range(len(data))]
            return losses, [n for n, _ in t.prefix.named_parameters()], t.prefix_parameters() if w.rank == 0 else None

        results = run_parallel(role, [(w,) for w in c.workers], timeout=120)
    np.testing.assert_allclose(results[2][0], ref_losses, rtol=1e-5)
    assert results[0][1] == ["features.0.weight", "features.0.bias"]  # the model's names, for placements
    for got, want in zip(results[0][2], ref_model.features.parameters()):
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_split_model_cuts_torchvision_models_and_refuses_what_is_not_a_cut():
    torchvision = pytest.importorskip("torchvision")
    from layerps.placement import split_model
    x = torch.randn(2, 3, 64, 64)
    for make, cut in [(torchvision.models.vgg16, "classifier.0"), (torchvision.models.alexnet, "classifier.1"),
                      (torchvision.models.resnet18, "fc")]:
        model = make(weights=None).eval()
        prefix, suffix = split_model(model, cut)
        with torch.no_grad():
            assert torch.equal(suffix(prefix(x)), model(x)), cut
        assert len(list(prefix.parameters())) + len(list(suffix.parameters())) == len(list(model.parameters()))
    resnet = torchvision.models.resnet18(weights=None)
    with pytest.raises(layerps.InvalidArgumentError, match="not a cut point: the layers after it read 2 values"):
        split_model(resnet, "layer1.0.conv2")  # the residual shortcut crosses it
    with pytest.raises(layerps.InvalidArgumentError, match="no module call or operation 'fc9'"):
        split_model(resnet, "fc9")
    with pytest.raises(layerps.InvalidArgumentError, match="empty prefix"):
        split_model(resnet, "conv1")
