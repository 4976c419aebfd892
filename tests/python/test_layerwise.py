"""The layer-wise executor (layerps.placement.LayerwiseTrainer, docs/optcnn.md): OptCNN's
strategies, spatial and channel splits included, train exactly as one process does, and
the bytes they exchange are the bytes the search's cost model counts."""

import collections
import copy
import json
import subprocess

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import layerps
from layerps.errors import InvalidArgumentError
from layerps.placement import LayerwiseTrainer, profile
from layerps._layerwise import parse_config

from conftest import FAST, on_every_worker

BATCH = 8


def small_cnn(seed=0):
    """Padding, a stride-2 convolution (its halo is one row), pooling, and a flatten into a
    two-layer FC head."""
    torch.manual_seed(seed)
    return nn.Sequential(collections.OrderedDict([
        ("conv1", nn.Conv2d(3, 8, 3, padding=1)), ("relu1", nn.ReLU()), ("pool1", nn.MaxPool2d(2)),
        ("conv2", nn.Conv2d(8, 8, 3, stride=2, padding=1)), ("relu2", nn.ReLU(inplace=True)),
        ("flat", nn.Flatten()),
        ("fc1", nn.Linear(128, 16)), ("relu3", nn.ReLU()),
        ("fc2", nn.Linear(16, 4)),
    ]))


def batches(steps, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(BATCH, 3, 16, 16, generator=g), torch.randint(0, 4, (BATCH,), generator=g))
            for _ in range(steps)]


def one_process(steps, lr):
    model = small_cnn()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for x, y in steps:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses, model.state_dict()


def train_layerwise(workers, strategy, steps, lr):
    results = {}
    models = [small_cnn() for _ in workers]  # here: torch's seed is one for every thread

    def run(r, w):
        t = LayerwiseTrainer(models[r], strategy, steps[0][0], lr=lr, worker=w, timeout=60)
        losses = [t.step(x, y) for x, y in steps]
        results[r] = (losses, t.state_dict(), dict(t.stats))

    errors = on_every_worker(workers, run, timeout=120)
    assert errors == {}
    return results


def check_equal_to_one_process(results, expected_losses, expected_state):
    for r, (losses, state, _) in results.items():
        assert losses == pytest.approx(expected_losses, rel=1e-4, abs=1e-6), f"rank {r}"
        assert list(state) == list(expected_state)
        for k, v in expected_state.items():
            assert torch.allclose(state[k], v, rtol=1e-4, atol=1e-5), f"rank {r}: {k} differs"


# Every layer in its own configuration: data, model (channels), spatial (with halos on a
# stride-2 convolution and a pooling window), sample x spatial, idle devices, a channel
# split feeding a sample split, and the reverse.
STRATEGIES = {
    "data": dict.fromkeys(["conv1", "relu1", "pool1", "conv2", "relu2", "flat", "fc1", "relu3", "fc2"], "n4"),
    "channels": dict(conv1="c4", relu1="c4", pool1="c4", conv2="c4", relu2="c4", flat="c4", fc1="c4",
                     relu3="c4", fc2="c4"),
    "spatial": dict(conv1="h2w2", relu1="h4", pool1="w4", conv2="h4", relu2="h2w2", flat="h2", fc1="c2",
                    relu3="n2", fc2="1"),
    "mixed": dict(conv1="n2h2", relu1="n4", pool1="n2c2", conv2="c2w2", relu2="c2", flat="n2", fc1="n2c2",
                  relu3="c4", fc2="c2"),
    "idle": dict(conv1="1", relu1="h2", pool1="n2", conv2="n2c2", relu2="1", flat="c2", fc1="1", relu3="n4",
                 fc2="n2"),
}


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_configuration_trains_as_one_process(name):
    steps = batches(3)
    expected_losses, expected_state = one_process(steps, lr=0.1)
    with layerps.LocalCluster(num_servers=0, num_workers=4, transport="inproc", **FAST) as c:
        results = train_layerwise(c.workers, STRATEGIES[name], steps, lr=0.1)
    check_equal_to_one_process(results, expected_losses, expected_state)
    moved = sum(s["exchange_bytes"] + s["sync_bytes"] for _, _, s in results.values())
    if name == "data":
        assert sum(s["exchange_bytes"] for _, _, s in results.values()) == 0  # nothing crosses
        assert moved > 0  # but the gradients are all-reduced
    if name == "channels":
        assert sum(s["sync_bytes"] for _, _, s in results.values()) == 0  # one replica per shard


def test_the_searchs_strategies_move_the_bytes_its_cost_model_counts(tmp_path):
    """layerps-plan's optcnn report for the model (profiled from PyTorch), on 4 devices:
    each of its strategies (the search's pick, data, model, OWT) trains as one process,
    and the bytes the devices exchange between layers plus those they all-reduce are the
    report's bytes per step (the loss's gather of the logits is counted apart)."""
    prof = profile(small_cnn(), torch.zeros(2, 3, 16, 16), name="small")
    (tmp_path / "small.json").write_text(json.dumps(prof))
    p = subprocess.run([layerps.tool_path("layerps-plan"), f"--model={tmp_path / 'small.json'}", "--workers=4",
                        "--servers=1", f"--batch={BATCH // 4}", "--bandwidth=100Mbit", "--strategy=optcnn",
                        "--json"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    strategies = [report["optcnn"]] + report["baselines"]
    assert {s["name"] for s in strategies} == {"optcnn", "data", "model", "owt"}
    steps = batches(2)
    expected_losses, expected_state = one_process(steps, lr=0.05)
    with layerps.LocalCluster(num_servers=0, num_workers=4, transport="inproc", **FAST) as c:
        for s in strategies:
            results = train_layerwise(c.workers, s, steps, lr=0.05)
            check_equal_to_one_process(results, expected_losses, expected_state)
            per_step = sum(st["exchange_bytes"] + st["sync_bytes"] for _, _, st in results.values()) / len(steps)
            assert per_step == pytest.approx(s["bytes_per_step"], rel=1e-6, abs=8), s["name"]


def test_a_strategy_from_the_report_file_is_its_search_pick():
    report = {"optcnn": {"layers": [{"layer": "a", "degrees": {"n": 2, "c": 1, "h": 1, "w": 1}}]},
              "baselines": []}
    from layerps._layerwise import _strategy_configs
    assert _strategy_configs(report) == {"a": (2, 1, 1, 1)}
    assert _strategy_configs({"a": "n2h2", "b": (1, 2, 1, 1), "c": {"c": 4}}) == \
        {"a": (2, 1, 2, 1), "b": (1, 2, 1, 1), "c": (1, 4, 1, 1)}


@pytest.mark.parametrize("bad", ["", "x2", "n0", "n2n2", "2", (1, 2, 3), {"q": 2}])
def test_bad_configurations_are_refused(bad):
    with pytest.raises(InvalidArgumentError):
        parse_config(bad)


def test_bad_models_and_strategies_are_refused_with_the_layer_named():
    data = dict.fromkeys(STRATEGIES["data"], "1")
    x = torch.zeros(BATCH, 3, 16, 16)
    with layerps.LocalCluster(num_servers=0, num_workers=2, transport="inproc", **FAST) as c:
        w = c.workers[0]
        with pytest.raises(InvalidArgumentError, match="no configuration for layer.*fc2"):
            LayerwiseTrainer(small_cnn(), {k: v for k, v in data.items() if k != "fc2"}, x, lr=0.1, worker=w)
        with pytest.raises(InvalidArgumentError, match="lacks"):
            LayerwiseTrainer(small_cnn(), dict(data, fc9="1"), x, lr=0.1, worker=w)
        with pytest.raises(InvalidArgumentError, match="conv2.*does not fit"):
            LayerwiseTrainer(small_cnn(), dict(data, conv2="h3"), x, lr=0.1, worker=w)
        with pytest.raises(InvalidArgumentError, match="does not fit"):
            LayerwiseTrainer(small_cnn(), dict(data, conv1="n4"), x, lr=0.1, worker=w)  # 4 > 2 devices
        bn = copy.deepcopy(small_cnn())
        bn.relu1 = nn.BatchNorm2d(8)
        with pytest.raises(InvalidArgumentError, match="relu1.*BatchNorm2d"):
            LayerwiseTrainer(bn, data, x, lr=0.1, worker=w)
        with pytest.raises(InvalidArgumentError, match="Sequential"):
            LayerwiseTrainer(nn.Module(), data, x, lr=0.1, worker=w)
        t = LayerwiseTrainer(small_cnn(), data, x, lr=0.1, worker=w)
        with pytest.raises(InvalidArgumentError, match="global batch"):
            t.step(x[:4], torch.zeros(4, dtype=torch.long))
