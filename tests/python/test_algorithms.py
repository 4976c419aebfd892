"""The seven training algorithms from Python: layerps.algorithms.Trainer over numpy
buffers and layerps.torch.DistributedOptimizer(algorithm=...) over a torch model."""


import numpy as np
import pytest
import torch
import torch.nn as nn

import layerps
from conftest import FAST, on_every_worker
from layerps.algorithms import Trainer, parse_algorithm
from layerps.torch import DistributedOptimizer

# Generous timeouts: these tests run several threads of training on a 2-core machine, where
# a 1 s heartbeat timeout can declare a busy node dead.
ALG = dict(FAST, heartbeat_timeout_ms=5000, request_timeout_ms=60000)

ALL = ["bsp", "asp", "ssp(s=1)", "easgd(tau=2,alpha=0.3)", "arsgd", "gosgd(p=0.5)", "adpsgd"]


def _on_every_worker(workers, fn):
    return on_every_worker(workers, fn, timeout=180)


def test_parse_algorithm_canonical_forms_and_errors():
    assert parse_algorithm("SSP(3)") == "ssp(s=3)"
    assert parse_algorithm("easgd(4, 0.25)") == "easgd(tau=4,alpha=0.25)"
    assert parse_algorithm("gosgd") == "gosgd(p=0.5)"
    for bad, needle in [("ssp(-1)", "staleness"), ("easgd(0,0.5)", "tau"), ("easgd(2,1)", "alpha"),
                        ("gosgd(2)", "p must"), ("adam", "unknown algorithm")]:
        with pytest.raises(layerps.InvalidArgumentError, match=needle):
            parse_algorithm(bad)


# --- a linear least-squares problem: worker r of W takes its slice of each global batch ---
RNG = np.random.default_rng(3)
A = RNG.standard_normal((240, 9)).astype(np.float32)
B = (A @ RNG.standard_normal(9).astype(np.float32) + 0.1 * RNG.standard_normal(240)).astype(np.float32)
X0 = RNG.uniform(-0.5, 0.5, 9).astype(np.float32)


def _grad(x, step, batch, rank, world):
    lo, hi = batch * rank // world, batch * (rank + 1) // world
    rows = [(step * batch + k) % len(B) for k in range(lo, hi)]
    a, b = A[rows].astype(np.float64), B[rows].astype(np.float64)
    return ((a.T @ (a @ x.astype(np.float64) - b)) / len(rows)).astype(np.float32)


def _loss(x):
    return float(np.mean((A.astype(np.float64) @ x - B) ** 2) / 2)


def test_numpy_trainer_arsgd_equals_one_process_with_the_global_batch():
    steps, batch, lr, m = 60, 16, 0.05, 0.9
    ref, buf = X0.copy(), np.zeros_like(X0)
    for t in range(steps):
        g = _grad(ref, t, batch, 0, 1)
        buf = m * buf + g
        ref = ref - lr * buf
    with layerps.LocalCluster(num_servers=1, num_workers=2, transport="inproc", **ALG) as c:
        finals = {}

        def train(r, w):
            x = X0.copy() if r == 0 else np.full_like(X0, 7.0)  # rank 0's start wins
            t = Trainer(x, "arsgd", lr=lr, momentum=m, worker=w)
            assert t.algorithm == "arsgd"
            for s in range(steps):
                t.step(_grad(x, s, batch, r, 2))
            t.finish()
            finals[r] = x
            assert t.stats()["steps"] == steps

        assert _on_every_worker(c.workers, train) == {}
    for r in range(2):
        np.testing.assert_allclose(finals[r], ref, rtol=1e-5, atol=1e-5)
    assert _loss(finals[0]) < 0.5 * _loss(X0)


def test_trainer_refuses_bad_input():
    with layerps.LocalCluster(num_servers=1, num_workers=1, transport="inproc", **ALG) as c:
        w = c.workers[0]
        x = np.zeros(4, np.float32)
        with pytest.raises(layerps.InvalidArgumentError, match="staleness"):
            Trainer(x, "ssp(-2)", lr=0.1, worker=w)
        with pytest.raises(layerps.InvalidArgumentError, match="learning_rate"):
            Trainer(x, "arsgd", lr=0.0, worker=w)
        with pytest.raises(layerps.InvalidArgumentError, match="decay"):
            Trainer(x, "arsgd", lr=0.1, decay="linear", worker=w)
        with pytest.raises(layerps.InvalidArgumentError, match="float32"):
            Trainer(np.zeros(4), "arsgd", lr=0.1, worker=w)
        t = Trainer(x, "arsgd", lr=0.1, worker=w)
        with pytest.raises(layerps.InvalidArgumentError, match="elements"):
            t.step(np.zeros(5, np.float32))


# --- PyTorch -------------------------------------------------------------------------------
def _model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(9, 6), nn.Tanh(), nn.Linear(6, 1))


def _torch_batch(step, batch, rank, world):
    lo, hi = batch * rank // world, batch * (rank + 1) // world
    rows = [(step * batch + k) % len(B) for k in range(lo, hi)]
    return torch.from_numpy(A[rows]), torch.from_numpy(B[rows]).unsqueeze(1)


def _train_torch(c, algorithm, steps, batch, lr=0.05, momentum=0.0, **kw):
    """Trains _model() on every worker with algorithm=...; returns {rank: flat params}."""
    world = len(c.workers)
    finals = {}
    # Built here, not in the threads: torch.manual_seed seeds one global generator, which
    # concurrent threads would reseed under each other.
    models = {r: _model(seed=0 if r == 0 else 100 + r) for r in range(world)}  # rank 0's must win

    def train(r, w):
        model = models[r]
        opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum),
                                   model.named_parameters(), worker=w, algorithm=algorithm, **kw)
        for s in range(steps):
            x, y = _torch_batch(s, batch, r, world)
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        opt.finish()
        finals[r] = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy().copy()

    errors = _on_every_worker(c.workers, train)
    assert errors == {}, errors
    return finals


def test_torch_arsgd_equals_one_process_with_the_global_batch():
    steps, batch, lr, m = 40, 16, 0.05, 0.9
    model = _model(0)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=m)
    for s in range(steps):
        x, y = _torch_batch(s, batch, 0, 1)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    ref = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()
    with layerps.LocalCluster(num_servers=1, num_workers=2, transport="inproc", **ALG) as c:
        finals = _train_torch(c, "arsgd", steps, batch, lr=lr, momentum=m)
    for r in range(2):
        np.testing.assert_allclose(finals[r], ref, rtol=1e-5, atol=1e-5)


def _mse(flat):
    model = _model(0)
    with torch.no_grad():
        off = 0
        for p in model.parameters():
            p.copy_(torch.from_numpy(flat[off:off + p.numel()]).view_as(p))
            off += p.numel()
        return float(nn.functional.mse_loss(model(torch.from_numpy(A)), torch.from_numpy(B).unsqueeze(1)))


@pytest.mark.parametrize("algorithm", ALL)
def test_every_algorithm_trains_a_torch_model(algorithm):
    start = _mse(torch.cat([p.detach().reshape(-1) for p in _model(0).parameters()]).numpy())
    with layerps.LocalCluster(num_servers=1, num_workers=2, transport="inproc", **ALG) as c:
        finals = _train_torch(c, algorithm, steps=80, batch=16, lr=0.05, momentum=0.5,
                              warmup_steps=5, name=f"model-{algorithm}")
    for r, flat in finals.items():
        assert _mse(flat) < 0.6 * start, (algorithm, r, _mse(flat), start)


def test_distributed_optimizer_refuses_what_the_algorithms_cannot_run():
    with layerps.LocalCluster(num_servers=1, num_workers=1, transport="inproc", **ALG) as c:
        w = c.workers[0]
        model = _model()
        with pytest.raises(layerps.InvalidArgumentError, match="torch.optim.SGD"):
            DistributedOptimizer(torch.optim.Adam(model.parameters()), worker=w, algorithm="arsgd")
        with pytest.raises(layerps.InvalidArgumentError, match="weight_decay"):
            DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=0.1),
                                 worker=w, algorithm="arsgd")
        with pytest.raises(layerps.InvalidArgumentError, match="either mode"):
            DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), worker=w,
                                 mode="server", algorithm="bsp")
        with pytest.raises(layerps.InvalidArgumentError, match="unknown algorithm"):
            DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), worker=w, algorithm="sgd")
