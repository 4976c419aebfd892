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
