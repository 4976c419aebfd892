"""The automatic plan: every strategy LayerPS can execute predicted for a PyTorch model
on a cluster, the fastest chosen with its reason (``layerps-plan --strategy=auto``), a short
probe that measures what the cost model needs, and a runner that trains with the chosen
plan. Reached as ``layerps.placement.plan``, ``probe`` and ``runner`` (docs/placement.md,
"The automatic plan")."""

import json
import os
import subprocess
import tempfile
import time

import torch

from .errors import FailedPreconditionError, InvalidArgumentError

# What each strategy runs as (runner()): no cut: a DistributedOptimizer mode; a cut: the
# split step.
_OPTIMIZER_MODE = {"uniform": "ps", "balanced": "ps", "allreduce": "horovod", "hybrid": "hybrid"}
_CUT_STRATEGIES = ("park", "stanza")


def _rows_touched(model, example_input, batch):
    """The fraction of each embedding's rows a batch of ``batch`` samples looks up, from
    the example input (its share scaled to the batch; the largest over the embeddings),
    or None for a model without embeddings."""
    fractions, hooks = [], []

    def seen(mod, inp, out):
        ids = inp[0] if inp else None
        if isinstance(ids, torch.Tensor) and ids.numel():
            fractions.append(torch.unique(ids).numel() / mod.num_embeddings)

    for m in model.modules():
        if isinstance(m, (torch.nn.Embedding, torch.nn.EmbeddingBag)):
            hooks.append(m.register_forward_hook(seen))
    if not hooks:
        return None
    from ._profile import forward_with_hooks
    forward_with_hooks(model, example_input, hooks)
    if not fractions:
        return None
    scale = batch / max(1, example_input.shape[0])
    return float(min(1.0, max(fractions) * scale)) or 1e-6


def plan(model, example_input, *, workers, servers, batch=None, bandwidth="10Gbit", latency=None,
         worker_flops=None, server_flops=None, calibration=None, embedding_rows_touched=None,
         strategy="auto", name="model", timeout=600, time_layers=False):
    """Profiles ``model`` on ``example_input`` (layerps.placement.profile) and runs
    ``layerps-plan --strategy=auto`` for a cluster of ``workers`` and ``servers``: every
    strategy LayerPS executes (uniform, balanced, park, stanza, allreduce, and the hybrid
    for models with embeddings) predicted, the fastest under the cost model chosen.

    ``batch``: samples per worker per step (default: the example's). ``calibration``: a
    dict from :func:`probe` (worker_flops, bandwidth, latency measured) whose values are
    used where the matching argument is not given. ``embedding_rows_touched``: the share of
    an embedding's rows a worker's batch touches; default: measured on the example input.
    ``time_layers``: time every layer's forward and backward here (profile's
    ``time_layers``), so that the cost model uses measured times scaled by the nodes'
    FLOP/s instead of FLOP counts (docs/placement.md, "Cost model"); worth it when the
    kernels' speeds per FLOP differ (convolutions against small-batch linear layers).

    Returns the comparison as a dict: ``chosen`` (the strategy), ``reason``, ``plans`` (each
    with its prediction and placement), ``skipped`` (strategies that do not apply, with
    why), ``profile``, and ``embedding_rows_touched`` used."""
    from .cluster import tool_path
    from ._profile import profile as make_profile

    if int(workers) < 1 or int(servers) < 1:
        raise InvalidArgumentError("plan: workers and servers must be >= 1")
    batch = int(batch or example_input.shape[0])
    prof = make_profile(model, example_input, name=name, time_layers=time_layers)
    cal = dict(calibration or {})
    flags = [f"--workers={int(workers)}", f"--servers={int(servers)}", f"--batch={batch}",
             f"--strategy={strategy}", "--json"]
    bandwidth = cal.get("bandwidth", bandwidth)
    latency = latency if latency is not None else cal.get("latency")
    worker_flops = worker_flops if worker_flops is not None else cal.get("worker_flops")
    server_flops = server_flops if server_flops is not None else cal.get("server_flops", worker_flops)
    for flag, v in (("bandwidth", bandwidth), ("latency", latency), ("worker_flops", worker_flops),
                    ("server_flops", server_flops)):
        if v is not None:
            flags.append(f"--{flag}={v}")
    touched = embedding_rows_touched
    if touched is None:
        touched = _rows_touched(model, example_input, batch)
    if touched is not None:
        flags.append(f"--embedding_rows_touched={touched:.6g}")
    fd, path = tempfile.mkstemp(prefix="layerps-profile-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(prof, f)
        p = subprocess.run([tool_path("layerps-plan"), f"--model={path}"] + flags, capture_output=True,
                           text=True, timeout=timeout)
    finally:
        os.unlink(path)
    if p.returncode != 0:
        raise InvalidArgumentError(f"plan: layerps-plan refused: {p.stderr.strip()}")
    out = json.loads(p.stdout)
    if "plans" not in out:  # one strategy asked for: a single plan
        out = {"plans": [out], "chosen": 0, "reason": out.get("reason", ""), "skipped": []}
    chosen = out["plans"][out["chosen"]] if isinstance(out["chosen"], int) else \
        next(q for q in out["plans"] if q["strategy"] == out["chosen"])
    out["chosen"] = chosen["strategy"]
    out["chosen_plan"] = chosen
    out["profile"] = prof
    out["embedding_rows_touched"] = touched
    return out


def probe(worker=None, *, seconds=0.5, sizes=(4, 1 << 22)):
    """Measures what the cost model needs on this machine and cluster: a worker's FLOP/s
    (float32 matrix products, torch's threads), and, with ``worker``, the latency and
    bandwidth to the servers (round trips of a 4-byte and a 4 MiB pull of a dense table;
    every worker calls it: the table is declared by all, and the figures are averaged over
    the workers). Returns {"worker_flops": F, "latency": "Ns", "bandwidth": "Nbit"}, the
    strings as layerps-plan reads them; pass it as ``calibration=`` to :func:`plan`."""
    n = 512
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    # The best of five rounds: a round that another process or the hypervisor preempted
    # reads low, and the cost model wants what the worker computes when it has the CPU.
    flops = 0.0
    for _ in range(5):
        done, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds / 10 or done == 0:
            torch.mm(a, b)
            done += 1
        flops = max(flops, 2.0 * n ** 3 * done / (time.perf_counter() - t0))
    out = {"worker_flops": f"{flops:.4g}"}
    if worker is None:
        return out
    w = worker
    small, big = int(sizes[0]) // 4 or 1, int(sizes[1]) // 4
    t_small = w.declare_dense("layerps.probe.small", small, "sum")
    t_big = w.declare_dense("layerps.probe.big", big, "sum")
    buf_small, buf_big = torch.zeros(small), torch.zeros(big)
    w.pull(t_small, buf_small).wait(60)
    w.pull(t_big, buf_big).wait(60)

    def timed(table, buf):
        k, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds / 4 or k < 3:
            w.pull(table, buf).wait(60)
            k += 1
        return (time.perf_counter() - t0) / k

    rtt = timed(t_small, buf_small)
    big_s = timed(t_big, buf_big)
    figures = torch.tensor([flops, rtt / 2, max(big_s - rtt, 1e-9)], dtype=torch.float64)
    if w.num_workers > 1:
        from . import collectives as C
        C.allreduce(figures, op=C.Average, worker=w)
    bandwidth = 8.0 * 4 * big / float(figures[2])
    return {"worker_flops": f"{float(figures[0]):.4g}", "latency": f"{float(figures[1]):.4g}s",
            "bandwidth": f"{bandwidth:.4g}bit"}


def runner(chosen, worker, model, *, loss_fn, lr, batch, example_input, name="auto", timeout=60.0):
    """A trainer for the chosen plan (``plan(...)["chosen_plan"]`` or the dict itself),
    with one call per step: ``r.step(x, y)`` returns the loss (or None on ranks that only
    contribute). Plans without a cut run ``layerps.torch.DistributedOptimizer`` over plain
    SGD: uniform and balanced in mode "ps", allreduce in mode "horovod", hybrid in mode
    "hybrid". Park and stanza run the split step (``SplitTrainer``) cut where the plan says:
    worker ranks 0..W-1 are the conv workers and the ranks after them the suffix ranks (park:
    1, the PS worker; stanza: its N_f FC nodes), so launch W + that many workers (the suffix
    ranks on the server machines)."""
    import layerps.torch as lt
    from ._split import SplitTrainer

    p = chosen.get("chosen_plan", chosen)
    strategy = p["strategy"]
    if strategy in _OPTIMIZER_MODE:
        opt = lt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr), model.named_parameters(),
                                      worker=worker, mode=_OPTIMIZER_MODE[strategy], name=name)
        return _OptimizerRunner(model, opt, loss_fn)
    if strategy not in _CUT_STRATEGIES:
        raise InvalidArgumentError(f"runner: strategy {strategy!r} is not one LayerPS runs from a plan "
                                   f"({', '.join(list(_OPTIMIZER_MODE) + list(_CUT_STRATEGIES))})")
    W = int(p["cluster"]["workers"])
    roles = p.get("roles", {})
    n_suffix = len(roles.get("fc_nodes", [])) if strategy == "stanza" else 1
    if worker.num_workers < W + n_suffix:
        raise FailedPreconditionError(f"runner: the {strategy} plan needs {W} conv workers and {n_suffix} "
                                      f"suffix rank(s): launch {W + n_suffix} workers, not {worker.num_workers}")
    suffix = list(range(W, W + n_suffix))
    t = SplitTrainer(worker, model, p["cut_layer"], loss_fn, lr=lr, conv_workers=list(range(W)),
                     suffix_ranks=suffix, batch=batch, example_input=example_input, name=name, timeout=timeout)
    return _SplitRunner(t)


class _OptimizerRunner:
    def __init__(self, model, opt, loss_fn):
        self.model, self.optimizer, self.loss_fn = model, opt, loss_fn

    def step(self, x, y):
        self.optimizer.zero_grad()
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        return float(loss.detach())

    def finish(self):
        self.optimizer.finish()


class _SplitRunner:
    def __init__(self, trainer):
        self.trainer = trainer

    def step(self, x=None, y=None):
        return self.trainer.step(x, y)

    def finish(self):
        pass
