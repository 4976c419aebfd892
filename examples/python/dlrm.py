#!/usr/bin/env python3
"""DLRM trained through LayerPS: embeddings on the servers, the MLPs by all-reduce.

The model is DLRM (Naumov et al., 2019): a bottom MLP over the 13 dense features, one
embedding bag per sparse feature (26, each its own table), the pairwise dot products of
the 27 resulting vectors, and a top MLP over them and the bottom MLP's output, ending in
the click logit. The data is Criteo-shaped and generated from a seed
(examples/python/criteo_synth.py: power-law ids over Criteo's cardinalities, capped by
--max_rows; a click label from a hidden model).

The 26 tables are one ``layerps.torch.EmbeddingBagCollection``: a forward pulls every
table's rows with one fused request per server, backward pushes every table's gradient
rows with one fused request per server, and the servers apply row-wise Adagrad (or
--rule) to them. With ``--sync bsp`` (default) the servers sum each step's pushes of all
workers and apply them once, so W workers train exactly what one process would on the
global batch. The MLPs are averaged by all-reduce (``DistributedOptimizer``, Horovod's
mode) and stepped by a local Adagrad.

    python -m layerps.launch -s 2 -w 2 -- python examples/python/dlrm.py --steps 50

(`python` is the venv's.) Prints the loss as it falls, then the held-out log loss and
AUC (rank 0); --json FILE writes them with the run's settings and samples/s.
"""

import argparse
import json
import os
import resource
import sys
import time

import numpy as np
import torch
import torch.nn as nn

import layerps
import layerps.torch as lt

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from criteo_synth import FEATURES, NUM_DENSE, CriteoSynth  # noqa: E402


def mlp(sizes, last_activation):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or last_activation:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    """DLRM's dot interaction over an EmbeddingBagCollection held by the servers."""

    def __init__(self, worker, dim=16, bottom=(512, 256, 64), top=(512, 256), max_rows=None,
                 rule="rowwise_adagrad", lr=0.05, sync="bsp", bounds=None, prefix="dlrm", hyper=None,
                 fused=True):
        super().__init__()
        self.bottom = mlp((NUM_DENSE,) + tuple(bottom) + (dim,), last_activation=True)
        tables = [lt.EmbeddingBagConfig(f"{prefix}.t_{f}", dim, num_embeddings=None, feature_names=[f],
                                        pooling="sum", rule=rule, lr=lr, hyper=dict(hyper or {}),
                                        init="uniform", init_a=-0.05, init_b=0.05, seed=7, sync=sync,
                                        bounds=dict(bounds or {}))
                  for f in FEATURES]
        self.fused = fused
        if fused:
            self.embeddings = lt.EmbeddingBagCollection(tables, worker=worker)
        else:
            # One module (and one table, one request per server) per feature: the path a
            # model had before the collection, for comparison.
            self.embeddings = _Separate(tables, worker)
        n = len(FEATURES) + 1
        self._pairs = torch.triu_indices(n, n, offset=1)
        self.top = mlp((dim + n * (n - 1) // 2,) + tuple(top) + (1,), last_activation=False)

    def forward(self, dense, features):
        x = self.bottom(dense)
        pooled = self.embeddings(features)
        b = x.shape[0]
        vectors = torch.cat([x[:, None, :], pooled.values().reshape(b, len(FEATURES), -1)], dim=1)
        dots = torch.bmm(vectors, vectors.transpose(1, 2))[:, self._pairs[0], self._pairs[1]]
        return self.top(torch.cat([x, dots], dim=1)).squeeze(1)


class _Separate(nn.Module):
    """26 lt.EmbeddingBag modules looked up one by one (their requests one per table)."""

    def __init__(self, tables, worker):
        super().__init__()
        scale = 1.0 / max(1, worker.num_workers)
        self.bags = nn.ModuleList(lt.EmbeddingBag(None, t.embedding_dim, worker=worker, name=t.name,
                                                  mode=t.pooling, rule=t.rule, lr=t.lr, init=t.init,
                                                  init_a=t.init_a, init_b=t.init_b, seed=t.seed,
                                                  grad_scale=scale, sync=t.sync, **t.hyper, **t.bounds)
                                  for t in tables)
        self.features = [t.feature_names[0] for t in tables]
        self.requests = 0

    def forward(self, kjt):
        blocks = []
        for bag, f in zip(self.bags, self.features):
            jt = kjt[f]
            blocks.append(bag(jt.values(), jt.offsets()[:-1]))
        return lt.KeyedTensor(self.features, [b.shape[1] for b in blocks], torch.cat(blocks, 1))

    def flush(self):
        for bag in self.bags:
            bag.flush()


def features_of(sparse):
    """The (n, 26) id matrix as a KeyedJaggedTensor: one id per sample and feature."""
    n = sparse.shape[0]
    values = torch.from_numpy(np.ascontiguousarray(sparse.T)).reshape(-1)
    return lt.KeyedJaggedTensor.from_lengths_sync(list(FEATURES), values,
                                                 torch.ones(n * len(FEATURES), dtype=torch.int64))


def auc(labels, scores):
    """ROC AUC by ranks (ties averaged)."""
    labels = np.asarray(labels, dtype=np.float64)
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores), np.float64)
    sorted_scores = np.asarray(scores)[order]
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and sorted_scores[j + 1] == sorted_scores[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    pos = labels.sum()
    neg = len(labels) - pos
    if pos == 0 or neg == 0:
        return float("nan")
    return float((ranks[labels == 1].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


def lo_tx_bytes():
    """Bytes sent on the loopback interface of this network namespace (/proc/net/dev)."""
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name.strip() == "lo":
                return int(rest.split()[8])
    return 0


def messages_to_servers(worker):
    """Data messages this worker sent to the servers so far (the traffic counters)."""
    servers = {n.id for n in worker.nodes() if n.role == layerps._core.Role.SERVER}
    return sum(p["messages_sent"] for i, p in worker.traffic()["peers"].items() if i in servers)


def train(worker, steps, batch, *, seed=0, max_rows=100000, dim=16, bottom=(512, 256, 64),
          top=(512, 256), rule="rowwise_adagrad", lr=0.05, eps=1e-8, dense_lr=0.05, sync="bsp",
          eval_samples=4096, prefix="dlrm", bounds=None, log_every=0, warmup=1, fused=True,
          uniform_rows=None):
    """Trains on this worker's shard of each global batch (batch samples per worker) and
    evaluates on held-out samples. The first `warmup` steps are not timed (declares, the
    first pulls); the batches are generated before the timed steps. Returns a dict:
    losses (this worker's, per step), the held-out log loss and AUC, samples/s over the
    timed steps, the loopback bytes sent meanwhile (every process's when the job runs in a
    network namespace of its own), the fused requests made, the model."""
    rank, world = worker.rank, worker.num_workers
    gen = CriteoSynth(seed, max_rows=max_rows, uniform_rows=uniform_rows)
    hyper = {"eps": eps} if rule in ("adagrad", "rowwise_adagrad", "adam") else {}
    model = DLRM(worker, dim, bottom, top, max_rows, rule, lr, sync, bounds, prefix, hyper, fused)
    # The MLPs' initial values from a generator of their own (torch's default one is shared
    # by the threads of an in-process cluster): the same on every worker and in every run.
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Linear):
                bound = 1.0 / m.in_features ** 0.5
                m.weight.uniform_(-bound, bound, generator=g)
                m.bias.uniform_(-bound, bound, generator=g)
    dense_params = [(n, p) for n, p in model.named_parameters()]
    opt = lt.DistributedOptimizer(torch.optim.Adagrad([p for _, p in dense_params], lr=dense_lr),
                                  named_parameters=dense_params, worker=worker, mode="horovod",
                                  name=prefix)
    loss_fn = nn.BCEWithLogitsLoss()
    rows = np.arange(rank * batch, (rank + 1) * batch)
    batches = [gen.batch(step, rows) for step in range(steps)]
    losses = []
    start = tx0 = None
    for step, (dense, sparse, labels) in enumerate(batches):
        if step == min(warmup, steps - 1):
            model.embeddings.flush()
            worker.barrier("workers", timeout=600)
            start, tx0, msg0 = time.perf_counter(), lo_tx_bytes(), messages_to_servers(worker)
        opt.zero_grad()
        loss = loss_fn(model(torch.from_numpy(dense), features_of(sparse)), torch.from_numpy(labels))
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        if log_every and rank == 0 and (step % log_every == 0 or step == steps - 1):
            print(f"step {step:4d}  loss {losses[-1]:.4f}", flush=True)
    model.embeddings.flush()
    worker.barrier("workers", timeout=600)
    elapsed = time.perf_counter() - start
    timed = steps - min(warmup, steps - 1)
    tx = lo_tx_bytes() - tx0
    messages = messages_to_servers(worker) - msg0
    # Held out: samples of a step no training batch used, the same on every worker.
    model.eval()
    with torch.no_grad():
        dense, sparse, labels = gen.batch(10**9, np.arange(eval_samples))
        scores = torch.sigmoid(model(torch.from_numpy(dense), features_of(sparse))).numpy()
    model.train()
    p = np.clip(scores.astype(np.float64), 1e-7, 1 - 1e-7)
    logloss = float(-np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p)))
    opt.finish()
    return {"losses": losses, "logloss": logloss, "auc": auc(labels, scores),
            "samples_per_s": timed * batch * world / elapsed, "timed_steps": timed,
            "lo_tx_bytes_per_step": tx / timed, "messages_to_servers_per_step": messages / timed,
            "requests": model.embeddings.requests,
            "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "model": model}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch", type=int, default=256, help="samples per worker and step (default 256)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max_rows", type=int, default=100000,
                    help="cap on every feature's cardinality (default 100000; 0: Criteo's, up to 10.1M)")
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--rule", default="rowwise_adagrad", help="the servers' rule for the tables")
    ap.add_argument("--lr", type=float, default=0.05, help="the tables' learning rate")
    ap.add_argument("--dense_lr", type=float, default=0.05, help="the MLPs' Adagrad learning rate")
    ap.add_argument("--sync", choices=("bsp", "async"), default="bsp")
    ap.add_argument("--eps", type=float, default=1e-8, help="the tables' rule's epsilon")
    ap.add_argument("--tables", choices=("fused", "separate"), default="fused",
                    help="one EmbeddingBagCollection (default) or one EmbeddingBag per table")
    ap.add_argument("--capacity", type=int, default=0,
                    help="bound every table to this many rows per server (LRU; default 0: none)")
    ap.add_argument("--uniform_rows", type=int, default=0,
                    help="give every feature this many ids instead of Criteo's cardinalities")
    ap.add_argument("--eval_samples", type=int, default=4096)
    ap.add_argument("--warmup", type=int, default=1, help="untimed first steps (default 1)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per worker (default 1)")
    ap.add_argument("--quiet", action="store_true", help="no loss lines")
    ap.add_argument("--json", help="write the results (rank 0) to this file")
    args = ap.parse_args()
    if args.steps < 1 or args.batch < 1 or args.warmup < 0:
        ap.error("--steps and --batch must be >= 1, --warmup >= 0")
    torch.set_num_threads(args.threads)
    w = layerps.init()
    out = train(w, args.steps, args.batch, seed=args.seed, max_rows=args.max_rows or None, dim=args.dim,
                rule=args.rule, lr=args.lr, eps=args.eps, dense_lr=args.dense_lr, sync=args.sync,
                eval_samples=args.eval_samples, log_every=0 if args.quiet else 10, warmup=args.warmup,
                fused=args.tables == "fused", uniform_rows=args.uniform_rows or None,
                bounds={"capacity": args.capacity} if args.capacity else None)
    from layerps.collectives import allgather
    rss = allgather(np.array([out["maxrss_kib"]], dtype=np.int64), worker=w).tolist()
    # Nobody leaves before every worker's all-gather completed (a member that leaves at once
    # can fail another's collective while its last acknowledgements are in flight).
    w.barrier("workers", timeout=600)
    if w.rank == 0:
        print(f"held out: log loss {out['logloss']:.4f}, AUC {out['auc']:.4f}; "
              f"{out['samples_per_s']:.0f} samples/s with {w.num_workers} worker(s); "
              f"{out['lo_tx_bytes_per_step'] / 1e6:.2f} MB on the loopback and "
              f"{out['messages_to_servers_per_step']:.0f} messages to the servers per step (rank 0)", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({k: v for k, v in out.items() if k != "model"} |
                          {"workers": w.num_workers, "servers": w.num_servers, "worker_maxrss_kib": rss,
                           "args": vars(args)}, f, indent=1)
    layerps.shutdown()


if __name__ == "__main__":
    main()
