"""Server-side optimizers: dense tables equal torch.optim step for step; sparse tables equal
a lazy reference (only the rows a push touches are updated, their state kept beside them)."""

import numpy as np
import pytest
import torch

import layerps
from conftest import FAST

STEPS = 40


def run_dense(w, name, rule, lr, x0, grads, **hyper):
    t = w.declare_dense(name, x0.size, rule, lr=lr, **hyper)
    w.assign(t, x0).wait()
    for g in grads:
        w.push(t, g).wait()
    return w.pull(t).wait()


@pytest.mark.parametrize("rule,make", [
    ("momentum", lambda p, lr: torch.optim.SGD([p], lr=lr, momentum=0.9)),
    ("nesterov", lambda p, lr: torch.optim.SGD([p], lr=lr, momentum=0.9, nesterov=True)),
    ("adagrad", lambda p, lr: torch.optim.Adagrad([p], lr=lr, eps=1e-10)),
    ("adam", lambda p, lr: torch.optim.Adam([p], lr=lr, betas=(0.9, 0.999), eps=1e-8)),
], ids=["momentum", "nesterov", "adagrad", "adam"])
def test_dense_rules_match_torch_optim(rule, make):
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal(1000).astype(np.float32)
    grads = [rng.standard_normal(1000).astype(np.float32) for _ in range(STEPS)]
    lr = 0.01
    p = torch.nn.Parameter(torch.from_numpy(x0.copy()))
    opt = make(p, lr)
    for g in grads:
        p.grad = torch.from_numpy(g.copy())
        opt.step()
    hyper = {"epsilon": 1e-10} if rule == "adagrad" else {}
    with layerps.LocalCluster(num_servers=2, num_workers=1, dense_chunk_elems=128, **FAST) as c:
        got = run_dense(c.workers[0], "t", rule, lr, x0, grads, **hyper)
    np.testing.assert_allclose(got, p.detach().numpy(), rtol=1e-6, atol=1e-6)


def lazy_reference(rule, x_rows, key_steps, grad_steps, lr, **h):
    """Row-wise reference: duplicates of a step summed, then each touched row stepped."""
    dim = next(iter(x_rows.values())).size
    state = {k: np.zeros((3, dim), np.float64) for k in x_rows}
    x = {k: v.astype(np.float64).copy() for k, v in x_rows.items()}
    for keys, grads in zip(key_steps, grad_steps):
        summed = {}
        for k, g in zip(keys, grads):
            summed[k] = summed.get(k, 0) + g.astype(np.float64)
        for k, g in summed.items():
            s = state[k]
            if rule == "adagrad":
                s[0] += g * g
                x[k] -= lr * g / (np.sqrt(s[0]) + h["epsilon"])
            elif rule == "rowwise_adagrad":  # FBGEMM's: one accumulator per row
                s[0, 0] += np.mean(g * g)
                x[k] -= lr * g / (np.sqrt(s[0, 0]) + h.get("epsilon", h.get("eps")))
            elif rule == "adam":
                b1, b2, eps = 0.9, 0.999, 1e-8
                s[2] += 1
                s[0] = b1 * s[0] + (1 - b1) * g
                s[1] = b2 * s[1] + (1 - b2) * g * g
                c1, c2 = 1 - b1 ** s[2], 1 - b2 ** s[2]
                x[k] -= (lr / c1) * s[0] / (np.sqrt(s[1]) / np.sqrt(c2) + eps)
            elif rule == "ftrl":
                alpha, beta, l1, l2 = lr, h["ftrl_beta"], h["l1"], h["l2"]
                n_new = s[1] + g * g
                sigma = (np.sqrt(n_new) - np.sqrt(s[1])) / alpha
                s[0] += g - sigma * x[k]
                s[1] = n_new
                w = -(s[0] - np.sign(s[0]) * l1) / ((beta + np.sqrt(s[1])) / alpha + l2)
                x[k] = np.where(np.abs(s[0]) <= l1, 0.0, w)
            elif rule == "momentum":
                s[0] = 0.9 * s[0] + g
                x[k] -= lr * s[0]
    return x


@pytest.mark.parametrize("rule,hyper", [
    ("adagrad", {"epsilon": 1e-8}),
    ("rowwise_adagrad", {"eps": 1e-8}),
    ("adam", {}),
    ("ftrl", {"l1": 0.01, "l2": 0.1, "ftrl_beta": 1.0}),
    ("momentum", {}),
])
def test_sparse_rules_update_only_touched_rows_lazily(rule, hyper):
    rng = np.random.default_rng(1)
    dim, space = 8, 40
    key_steps = [rng.integers(0, space, 12).astype(np.int64) for _ in range(STEPS)]  # duplicates too
    grad_steps = [rng.standard_normal((12, dim)).astype(np.float32) for _ in range(STEPS)]
    lr = 0.05
    with layerps.LocalCluster(num_servers=2, num_workers=1, **FAST) as c:
        w = c.workers[0]
        t = w.declare_sparse("e", dim, rule, lr=lr, init="uniform", init_a=-0.1, init_b=0.1, seed=3, **hyper)
        all_keys = np.arange(space, dtype=np.int64)
        x0 = w.pull_sparse(t, all_keys).wait().copy()
        for keys, grads in zip(key_steps, grad_steps):
            w.push_sparse(t, keys, grads).wait()
        got = w.pull_sparse(t, all_keys).wait()
    want = lazy_reference(rule, {k: x0[k] for k in range(space)}, key_steps, grad_steps, lr, **hyper)
    touched = set(np.concatenate(key_steps).tolist())
    for k in range(space):
        np.testing.assert_allclose(got[k], want[k], rtol=2e-5, atol=2e-6, err_msg=f"row {k}")
        if k not in touched:
            np.testing.assert_array_equal(got[k], x0[k])  # never touched: never changed


def test_bad_hyperparameters_are_refused():
    with layerps.LocalCluster(num_servers=1, num_workers=1, **FAST) as c:
        w = c.workers[0]
        with pytest.raises(layerps.InvalidArgumentError, match="momentum must be in"):
            w.declare_dense("a", 4, "momentum", momentum=1.5)
        with pytest.raises(layerps.InvalidArgumentError, match="beta1 and beta2"):
            w.declare_dense("b", 4, "adam", beta2=1.0)
        with pytest.raises(layerps.InvalidArgumentError, match="epsilon"):
            w.declare_dense("c", 4, "adagrad", epsilon=0)
        with pytest.raises(layerps.InvalidArgumentError, match="l1, l2"):
            w.declare_sparse("d", 4, "ftrl", l1=-1)
        with pytest.raises(layerps.InvalidArgumentError, match="unknown table option"):
            w.declare_dense("e", 4, "adam", betas=0.5)
        with pytest.raises(layerps.InvalidArgumentError, match="rule must be one of"):
            w.declare_dense("f", 4, "rmsprop")
        with pytest.raises(layerps.InvalidArgumentError, match="rule 'sgd' takes no 'momentum'"):
            w.declare_sparse("g", 4, "sgd", momentum=0.5)
        with pytest.raises(layerps.InvalidArgumentError, match="rule 'rowwise_adagrad' takes no 'beta1'"):
            w.declare_sparse("h", 4, "rowwise_adagrad", beta1=0.5)
        with pytest.raises(layerps.InvalidArgumentError, match="given twice"):
            w.declare_sparse("i", 4, "adam", eps=1e-6, epsilon=1e-6)
        with pytest.raises(layerps.InvalidArgumentError, match="rowwise_adagrad is for sparse tables"):
            w.declare_dense("j", 4, "rowwise_adagrad")
        with pytest.raises(layerps.InvalidArgumentError, match="epsilon"):
            w.declare_sparse("k", 4, "rowwise_adagrad", eps=0)


# Every rule a sparse table takes, with each of its hyper-parameters: what the servers hold
# is what Python passed.
SPARSE_RULES = [
    ("sum", {}),
    ("sgd", {"lr": 0.5}),
    ("momentum", {"lr": 0.5, "momentum": 0.25}),
    ("nesterov", {"lr": 0.5, "momentum": 0.75}),
    ("adagrad", {"lr": 0.5, "eps": 1e-6}),
    ("rowwise_adagrad", {"lr": 0.5, "epsilon": 1e-5}),
    ("adam", {"lr": 0.5, "beta1": 0.5, "beta2": 0.75, "eps": 1e-4}),
    ("ftrl", {"lr": 0.5, "l1": 0.125, "l2": 0.25, "ftrl_beta": 2.0}),
    ("elastic", {"elastic_alpha": 0.125}),
]


def test_every_sparse_rule_and_its_hyperparameters_from_python():
    with layerps.LocalCluster(num_servers=1, num_workers=1, **FAST) as c:
        w = c.workers[0]
        for rule, hyper in SPARSE_RULES:
            t = w.declare_sparse(f"t_{rule}", 4, rule, **hyper)
            assert t.spec.rule == getattr(layerps._core.UpdateRule, rule.upper())
            for k, v in hyper.items():
                field = {"lr": "learning_rate", "eps": "epsilon"}.get(k, k)
                assert getattr(t.spec, field) == pytest.approx(v, rel=1e-7), (rule, k)
            w.push_sparse(t, np.array([3], np.int64), np.ones((1, 4), np.float32)).wait()
            assert w.pull_sparse(t, np.array([3], np.int64)).wait().shape == (1, 4)


def test_sync_modes_and_the_elastic_rule():
    with layerps.LocalCluster(num_servers=1, num_workers=2, **FAST) as c:
        w0, w1 = c.workers
        t0 = w0.declare_dense("bsp", 4, "sum", sync="bsp")
        t1 = w1.declare_dense("bsp", 4, "sum", sync="bsp")
        ones = np.ones(4, dtype=np.float32)
        w0.push(t0, ones).wait()  # counted for step 0, not applied alone
        w1.push(t1, ones).wait()  # step 0 complete: applied once, to the sum
        np.testing.assert_array_equal(w0.pull(t0).wait(), 2 * ones)
        np.testing.assert_array_equal(w1.pull(t1).wait(), 2 * ones)
        with pytest.raises(layerps.AlreadyExistsError, match="sync bsp"):
            w0.declare_dense("bsp", 4, "sum", sync="ssp", staleness=1)
        with pytest.raises(layerps.InvalidArgumentError, match="staleness"):
            w0.declare_dense("s", 4, "sgd", sync="ssp", staleness=-1)
        with pytest.raises(layerps.InvalidArgumentError, match="sync must be one of"):
            w0.declare_dense("s", 4, "sgd", sync="lockstep")
        with pytest.raises(layerps.InvalidArgumentError, match="elastic_alpha"):
            w0.declare_dense("e", 3, "elastic", elastic_alpha=1.0)
        centre = w0.declare_dense("centre", 3, "elastic", elastic_alpha=0.25)
        w0.assign(centre, np.array([4, 0, -4], dtype=np.float32)).wait()
        before = w0.pushpull(centre, np.full(3, 8, dtype=np.float32)).wait()
        np.testing.assert_array_equal(before, [4, 0, -4])  # the centre before the exchange
        np.testing.assert_array_equal(w0.pull(centre).wait(), [5, 2, -1])
