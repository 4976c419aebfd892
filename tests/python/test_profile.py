"""layerps.placement.profile on models that are not nn.Sequential: torchvision's networks
traced with torch.fx (weights=None). Their per-layer parameter counts are the modules'
(a batch norm folded into its convolution), and the profile given to layerps-plan gives the
same plan and bytes as the planner's built-in profile of the same model."""

import json
import re
import subprocess

import pytest
import torch

import layerps
from layerps.placement import profile

torchvision = pytest.importorskip("torchvision")

MODELS = {
    # name: (constructor, input side) — the built-in profiles' input sizes
    "alexnet": (lambda: torchvision.models.alexnet(weights=None), 224),
    "vgg16": (lambda: torchvision.models.vgg16(weights=None), 224),
    "resnet50": (lambda: torchvision.models.resnet50(weights=None), 224),
    "inception_v3": (lambda: torchvision.models.inception_v3(weights=None, aux_logits=False, init_weights=False), 299),
}


def plan(model_arg, tmp_path, *extra):
    out = tmp_path / "profile_out.json"
    p = subprocess.run([layerps.tool_path("layerps-plan"), f"--model={model_arg}", "--workers=4", "--servers=2",
                        "--bandwidth=1Gbit", "--nolayers", f"--write_profile={out}", *extra],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout, json.loads(out.read_text())


def strategy_rows(stdout):
    """{strategy: (NIC MB, PS MB, PS/uni)} from the comparison table, and the chosen one."""
    rows = {}
    for line in stdout.splitlines():
        m = re.match(r"^[ *] (uniform|balanced|park|stanza)\s+\S+\s+\S+ \d+\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", line)
        if m:
            rows[m.group(1)] = m.groups()[1:]
    chosen = re.search(r"^Chosen: (\w+)", stdout, re.M).group(1)
    return rows, chosen


@pytest.mark.parametrize("name", list(MODELS))
def test_a_torchvision_model_profiles_like_the_builtin_and_plans_the_same(name, tmp_path):
    make, side = MODELS[name]
    model = make()
    traced = profile(model, torch.zeros(1, 3, side, side), name=name)
    # Every parameter counted once; the per-layer counts are the modules' (conv + its BN).
    assert sum(l["param_bytes"] for l in traced["layers"]) == 4 * sum(p.numel() for p in model.parameters())
    modules = dict(model.named_modules())
    for layer in traced["layers"]:
        if layer["kind"] in ("conv", "fc"):
            mod = modules[layer["name"]]
            own = sum(p.numel() for p in mod.parameters())
            extra = layer["param_bytes"] // 4 - own
            assert extra in (0, 2 * mod.weight.shape[0]), (layer["name"], extra)  # a folded BN: scale, shift
    # The same per-layer parameter counts as the built-in profile (as multisets: layer
    # names and the order of parallel branches differ).
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(traced))
    builtin_out, builtin = plan(name, tmp_path)
    traced_out, _ = plan(str(path), tmp_path)
    assert sorted(l["param_bytes"] for l in builtin["layers"] if l["param_bytes"]) == \
        sorted(l["param_bytes"] for l in traced["layers"] if l["param_bytes"])
    # The same plan: the same strategy chosen, the same bytes for every strategy.
    assert strategy_rows(traced_out) == strategy_rows(builtin_out), (traced_out, builtin_out)


def test_the_traced_profile_has_the_residual_dag():
    model = torchvision.models.resnet18(weights=None)
    p = profile(model, torch.zeros(2, 3, 64, 64), name="resnet18")
    by_name = {l["name"]: l for l in p["layers"]}
    assert by_name["conv1"]["inputs"] == [] and by_name["maxpool"]["inputs"] == ["conv1"]
    first_add = next(l for l in p["layers"] if l["kind"] == "other")
    assert sorted(first_add["inputs"]) == ["layer1.0.conv2", "maxpool"]  # the block and its shortcut
    assert by_name["layer2.0.downsample.0"]["inputs"] == [first_add["name"].replace("add", "add_1")]
    assert by_name["fc"]["shape"]["in_channels"] == 512
    assert by_name["conv1"]["activation_bytes"] == 4 * 64 * 32 * 32  # per sample, the batch of 2 divided out


def test_models_that_cannot_be_profiled_are_refused_with_the_reason():
    class Branchy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x):
            if x.sum() > 0:  # data-dependent: torch.fx cannot trace it
                return self.fc(x)
            return x

    with pytest.raises(layerps.InvalidArgumentError, match="torch.fx cannot trace Branchy"):
        profile(Branchy(), torch.zeros(2, 4))
    with pytest.raises(layerps.InvalidArgumentError, match="on an input of shape \\(2, 5\\) failed"):
        profile(torchvision.models.resnet18(weights=None), torch.zeros(2, 5))
    with pytest.raises(layerps.InvalidArgumentError, match="batch dimension"):
        profile(torchvision.models.resnet18(weights=None), torch.zeros(()))


# --- the automatic plan (layerps.placement.plan / probe / runner) ---------------------------
def test_auto_predicts_every_executable_strategy_and_picks_with_its_reason():
    from layerps.placement import plan
    vgg = plan(torchvision.models.vgg16(weights=None), torch.zeros(2, 3, 64, 64), workers=4, servers=2,
               batch=32, bandwidth="1Gbit")
    assert {q["strategy"] for q in vgg["plans"]} == {"uniform", "balanced", "park", "stanza", "allreduce"}
    assert any(s.startswith("hybrid: the model has no embedding layer") for s in vgg["skipped"])
    assert any(s.startswith("optcnn: not compared") for s in vgg["skipped"])
    # A cut at the FC head: before avgpool (at 64 x 64 it gets 512 x 2 x 2 values and sends
    # on 512 x 7 x 7: cutting before it moves 12x fewer activation bytes) or classifier.0.
    assert vgg["chosen"] in ("park", "stanza") and vgg["chosen_plan"]["cut_layer"] in ("avgpool", "classifier.0")
    assert vgg["reason"].startswith(vgg["chosen"])
    # ResNet: no cut pays (torchvision's adaptive pool keeps the 512 x 1000 head its size).
    res = plan(torchvision.models.resnet18(weights=None), torch.zeros(2, 3, 64, 64), workers=4, servers=2,
               batch=32, bandwidth="1Gbit")
    assert not res["chosen_plan"].get("cut_layer"), res["reason"]


class BagLM(torch.nn.Module):
    def __init__(self, rows=10000, dim=16):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(rows, dim, sparse=True)
        self.fc = torch.nn.Linear(dim, 4)

    def forward(self, ids):
        return self.fc(self.emb(ids).mean(1))


def test_auto_measures_the_rows_an_embedding_touches_and_predicts_the_hybrid():
    from layerps.placement import plan
    ids = torch.arange(40).reshape(4, 10) % 25  # 25 distinct rows of 10000 in a batch of 4
    r = plan(BagLM(), ids, workers=4, servers=2, batch=4, bandwidth="1Gbit")
    assert r["embedding_rows_touched"] == pytest.approx(25 / 10000)
    hybrid = next(q for q in r["plans"] if q["strategy"] == "hybrid")
    modes = {l["layer"]: l["mode"] for l in hybrid["layers"]}
    assert modes == {"emb": "ps", "mean": "allreduce", "fc": "allreduce"}  # mean(1): a layer of its own
    allreduce = next(q for q in r["plans"] if q["strategy"] == "allreduce")
    assert hybrid["prediction"]["worker_bytes"] < allreduce["prediction"]["worker_bytes"] / 100
    with pytest.raises(layerps.InvalidArgumentError, match="embedding_rows_touched must be in"):
        plan(BagLM(), ids, workers=4, servers=2, embedding_rows_touched=2.0)


def test_the_runner_trains_the_chosen_plan_and_the_probe_measures():
    from conftest import FAST, run_parallel
    from layerps.placement import plan, probe, runner
    ids = torch.randint(0, 10000, (8, 10), generator=torch.Generator().manual_seed(3))
    y = torch.randint(0, 4, (8,), generator=torch.Generator().manual_seed(4))
    chosen = plan(BagLM(), ids, workers=2, servers=1, strategy="hybrid")
    assert chosen["chosen"] == "hybrid"
    # One process on the global batch, plain SGD: what the runner's data parallelism equals.
    ref = BagLM()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.5)
    ref_losses = []
    for _ in range(3):
        ref_opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ref(ids), y)
        loss.backward()
        ref_opt.step()
        ref_losses.append(float(loss))
    # The models are made before the worker threads start: torch's global generator is
    # shared by the threads, whose initializations would interleave.
    models = [BagLM() for _ in range(2)]
    with layerps.LocalCluster(num_servers=1, num_workers=2, **FAST) as c:
        def role(w):
            model = models[w.rank]
            r = runner(chosen, w, model, loss_fn=torch.nn.functional.cross_entropy, lr=0.5, batch=4,
                       example_input=ids[:4])
            mine = slice(4 * w.rank, 4 * w.rank + 4)
            losses = [r.step(ids[mine], y[mine]) for _ in range(3)]
            r.finish()
            cal = probe(w, seconds=0.2)
            return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}, cal

        out = run_parallel(role, [(w,) for w in c.workers], timeout=120)
    for k, v in ref.state_dict().items():
        for _, state, _ in out:
            torch.testing.assert_close(state[k], v, rtol=0, atol=1e-5)
    assert sum(out[0][0]) + sum(out[1][0]) == pytest.approx(2 * sum(ref_losses), rel=1e-4)
    cal = out[0][2]
    assert float(cal["worker_flops"]) > 1e6
    assert cal["latency"].endswith("s") and float(cal["latency"][:-1]) > 0
    assert cal["bandwidth"].endswith("bit") and float(cal["bandwidth"][:-3]) > 1e6
    again = plan(BagLM(), ids, workers=2, servers=1, calibration=cal)  # layerps-plan reads them
    assert again["chosen"] in {q["strategy"] for q in again["plans"]}


def test_time_layers_times_every_layer_and_leaves_the_model_as_it_was(tmp_path):
    """profile(time_layers=True): every layer that computes gets its measured seconds, the
    profile the FLOP/s they were measured at, and the model keeps its parameters, its
    gradients (none), its batch-norm statistics and its mode, in-place ReLUs included;
    layerps-plan reads the profile and says it uses the measured times."""
    torch.manual_seed(0)
    nets = {
        "sequential": (torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8),
                                           torch.nn.ReLU(inplace=True), torch.nn.Flatten(),
                                           torch.nn.Linear(8 * 14 * 14, 10)), 16),
        "resnet18": (torchvision.models.resnet18(weights=None, num_classes=10), 32),
        # an in-place first layer: the caller's input must come back as it was
        "inplace_first": (torch.nn.Sequential(torch.nn.ReLU(inplace=True), torch.nn.Conv2d(3, 4, 3),
                                              torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 10)), 8),
    }
    for name, (net, side) in nets.items():
        net.train()
        frozen = [m for m in net.modules() if isinstance(m, torch.nn.BatchNorm2d)][:1]
        for m in frozen:
            m.eval()  # a frozen batch norm in a training model keeps its mode
        modes = [m.training for m in net.modules()]
        before = {k: v.clone() for k, v in net.state_dict().items()}
        x = torch.randn(4, 3, side, side)
        x0 = x.clone()
        prof = profile(net, x, name=name, time_layers=True)
        assert torch.equal(x, x0), name
        assert [m.training for m in net.modules()] == modes, name
        assert prof["reference_flops"] > 0, name
        timed = [l for l in prof["layers"] if l["param_bytes"] > 0]
        assert timed and all(l["train_seconds_per_sample"] > 0 for l in timed), name
        assert all(l["train_seconds_per_sample"] >= 0 for l in prof["layers"]), name
        assert net.training, name
        assert all(p.grad is None for p in net.parameters()), name
        after = net.state_dict()
        assert all(torch.equal(before[k], after[k]) for k in before), name
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(prof))
        p = subprocess.run([layerps.tool_path("layerps-plan"), f"--model={path}", "--workers=2", "--servers=2",
                            "--strategy=uniform", "--nolayers"], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        assert "measured layer times" in p.stdout, p.stdout
    # Without time_layers the profile has neither key.
    plain = profile(nets["sequential"][0], torch.randn(4, 3, 16, 16))
    assert "reference_flops" not in plain
    assert all("train_seconds_per_sample" not in l for l in plain["layers"])


def _plan_step(*flags):
    p = subprocess.run([layerps.tool_path("layerps-plan"), "--model=alexnet", "--workers=4", "--servers=2",
                        "--json", *flags], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    plan = json.loads(p.stdout)
    if "plans" in plan:
        plan = plan["plans"][plan["chosen"]] if isinstance(plan["chosen"], int) else \
            next(q for q in plan["plans"] if q["strategy"] == plan["chosen"])
    return plan["prediction"]["step_s"]


def test_plan_shared_links_carry_cross_side_traffic_and_turn_off_with_0_or_none():
    """--worker_link/--server_link/--server_loopback: 0 or none is off; a slow workers' link
    slows the PS (its pushes and pulls cross it) but not the workers' ring all-reduce."""
    for strategy in ("allreduce", "uniform"):
        base = _plan_step(f"--strategy={strategy}")
        assert _plan_step(f"--strategy={strategy}", "--worker_link=none", "--server_link=0",
                          "--server_loopback=none") == base
        slow = _plan_step(f"--strategy={strategy}", "--worker_link=100Mbit")
        assert (slow == base) if strategy == "allreduce" else (slow > base), strategy
    p = subprocess.run([layerps.tool_path("layerps-plan"), "--model=alexnet", "--worker_link=fast"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "worker_link" in p.stderr


def test_plan_worker_loopback_carries_the_workers_ring_instead_of_their_nics():
    """--worker_loopback: the workers' ring all-reduce crosses their host's loopback, not
    their NICs (slow NICs no longer slow it); 0 or none is off; a PS strategy is unchanged."""
    slow_nics = ("--bandwidth=100Mbit",)
    nics = _plan_step("--strategy=allreduce", *slow_nics)
    assert _plan_step("--strategy=allreduce", *slow_nics, "--worker_loopback=none") == nics
    assert _plan_step("--strategy=allreduce", *slow_nics, "--worker_loopback=40Gbit") < nics / 10
    assert _plan_step("--strategy=uniform", *slow_nics, "--worker_loopback=40Gbit") == \
        _plan_step("--strategy=uniform", *slow_nics)
    p = subprocess.run([layerps.tool_path("layerps-plan"), "--model=alexnet", "--worker_loopback=-1Gbit"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "worker_loopback" in p.stderr
