"""A click-through-rate style model whose feature embeddings live on the LayerPS servers.

Generated data: each example has F categorical fields; a feature is (field, value) hashed
to a 64-bit id, and the label is drawn from a hidden logistic model of the features. The
embeddings go through layerps.torch.Embedding (only the batch's rows are pulled, only
their gradients pushed; the servers apply SGD to the rows); the small MLP on top is
synchronized with DistributedOptimizer.

    python -m layerps.launch -s 2 -w 2 -- python examples/python/ctr_embedding.py

(`python` is the venv's: `source .venv/bin/activate` first, or write `.venv/bin/python`.)

Prints the loss as it falls; --json FILE writes the first and last losses and whether the
rows the model pulls equal what the servers hold (rank 0).
"""

import argparse
import json
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import layerps
import layerps.torch as lt


def feature_ids(fields, values):
    """Hashes (field, value) pairs to int64 ids spread over the whole 64-bit range."""
    x = (fields.astype(np.uint64) << np.uint64(32)) ^ values.astype(np.uint64)
    x = (x ^ (x >> np.uint64(33))) * np.uint64(0xFF51AFD7ED558CCD)
    x = (x ^ (x >> np.uint64(33))) * np.uint64(0xC4CEB9FE1A85EC53)
    x ^= x >> np.uint64(33)
    return x.view(np.int64)


def make_data(n, num_fields, vocab, seed):
    rng = np.random.default_rng(seed)
    # Zipf-like popularity: a few values are frequent, most are rare.
    values = np.minimum(rng.zipf(1.3, size=(n, num_fields)) - 1, vocab - 1)
    weights = rng.normal(0.0, 1.0, size=(num_fields, vocab))
    logits = weights[np.arange(num_fields)[None, :], values].sum(1) - 0.5
    labels = (rng.random(n) < 1.0 / (1.0 + np.exp(-logits))).astype(np.float32)
    fields = np.broadcast_to(np.arange(num_fields)[None, :], values.shape)
    return torch.from_numpy(feature_ids(fields, values)), torch.from_numpy(labels)


class CTRModel(nn.Module):
    def __init__(self, worker, num_fields, dim, lr):
        super().__init__()
        self.embedding = lt.Embedding(None, dim, worker=worker, name="ctr/features", lr=lr,
                                      init="uniform", init_a=-0.05, init_b=0.05, seed=1)
        self.mlp = nn.Sequential(nn.Linear(num_fields * dim, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, ids):
        return self.mlp(self.embedding(ids).flatten(1)).squeeze(1)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--examples", type=int, default=40000)
    p.add_argument("--fields", type=int, default=6)
    p.add_argument("--vocab", type=int, default=2000)
    p.add_argument("--dim", type=int, default=8)
    p.add_argument("--batch", type=int, default=256, help="per worker")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--embedding_lr", type=float, default=0.5)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json")
    args = p.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    worker = layerps.init()
    rank, nworkers = worker.rank, worker.num_workers
    ids, labels = make_data(args.examples, args.fields, args.vocab, args.seed)
    ids, labels = ids[rank::nworkers], labels[rank::nworkers]  # this worker's shard

    model = CTRModel(worker, args.fields, args.dim, args.embedding_lr)
    lt.broadcast_parameters(model.mlp.state_dict(), 0, worker=worker)
    opt = lt.DistributedOptimizer(torch.optim.Adam(model.mlp.parameters(), lr=args.lr),
                                  model.mlp.named_parameters(), worker=worker, name="ctr/mlp")

    steps = len(ids) // args.batch
    losses = []
    t0 = time.perf_counter()
    for epoch in range(args.epochs):
        order = torch.from_numpy(np.random.default_rng(args.seed * 1000 + epoch * 10 + rank).permutation(len(ids)))
        for s in range(steps):
            idx = order[s * args.batch:(s + 1) * args.batch]
            opt.zero_grad()
            loss = F.binary_cross_entropy_with_logits(model(ids[idx]), labels[idx])
            loss.backward()
            opt.step()
            losses.append(loss.item())
            if s % 20 == 0:
                print(f"worker {rank}: epoch {epoch + 1} step {s} loss {loss.item():.4f}", flush=True)
    model.embedding.flush()
    opt.finish()
    elapsed = time.perf_counter() - t0

    first, last = float(np.mean(losses[:10])), float(np.mean(losses[-10:]))
    # The rows the model sees equal what the servers hold, for the same ids.
    worker.barrier()  # every worker's pushes are in
    probe = ids[:64]
    seen = model.embedding.pull(probe)
    held = worker.pull_sparse(model.embedding.table, probe.reshape(-1)).wait()
    rows_match = bool(torch.equal(seen.reshape(-1, args.dim), held))
    stats = {"rows_pulled": model.embedding.rows_pulled, "rows_pushed": model.embedding.rows_pushed,
             "ids_seen": steps * args.epochs * args.batch * args.fields}
    print(f"worker {rank}: loss {first:.4f} -> {last:.4f} in {elapsed:.1f} s; rows pulled "
          f"{stats['rows_pulled']} of {stats['ids_seen']} ids looked up; pulled rows equal the "
          f"servers': {rows_match}", flush=True)
    worker.barrier()
    layerps.shutdown()
    if args.json and rank == 0:
        with open(args.json, "w") as f:
            json.dump({"first_loss": first, "last_loss": last, "rows_match": rows_match,
                       "seconds": elapsed, **stats}, f)


if __name__ == "__main__":
    main()
