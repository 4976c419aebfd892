"""A small CNN on scikit-learn's 8x8 digits, trained data-parallel through LayerPS.

Distributed (2 servers, 2 workers; each worker takes its half of every global batch):

    python -m layerps.launch -s 2 -w 2 -- python examples/python/digits_cnn.py

(`python` is the venv's: `source .venv/bin/activate` first, or write `.venv/bin/python`.)

The same model in one process, same global batch, seed and epochs (the reference):

    python examples/python/digits_cnn.py --local

Both print the test accuracy and the time per epoch; --json FILE writes them (rank 0).
With --mode=server the servers run SGD on the parameters instead of the workers.
"""

import argparse
import json
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


class Net(nn.Module):
    """Two 3x3 convolutions and two FC layers: 38 k parameters as it is; Net(32, 64, 1024),
    the benchmarks' "digits_wide", has 1.08 M (its first FC layer 1.05 M)."""

    def __init__(self, conv1=16, conv2=32, hidden=64):
        super().__init__()
        self.conv1 = nn.Conv2d(1, conv1, 3, padding=1)
        self.conv2 = nn.Conv2d(conv1, conv2, 3, padding=1)
        self.fc1 = nn.Linear(conv2 * 4 * 4, hidden)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def load_data(seed):
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    y = digits.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.2, random_state=seed, stratify=y)
    return (torch.from_numpy(x_tr), torch.from_numpy(y_tr), torch.from_numpy(x_te), torch.from_numpy(y_te))


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        acc = (model(x).argmax(1) == y).float().mean().item()
    model.train()
    return acc


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--local", action="store_true", help="train in this process, without a cluster")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch", type=int, default=64, help="global batch (split over the workers)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9, help="ignored (0) with --mode=server")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--mode", choices=["aggregate", "server"], default="aggregate")
    p.add_argument("--json", help="write the results here (rank 0)")
    args = p.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    x_tr, y_tr, x_te, y_te = load_data(args.seed)
    model = Net()
    momentum = 0.0 if args.mode == "server" else args.momentum
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=momentum)

    rank, nworkers, worker = 0, 1, None
    if not args.local:
        import layerps
        import layerps.torch as lt
        worker = layerps.init()
        rank, nworkers = worker.rank, worker.num_workers
        if args.batch % nworkers:
            raise SystemExit(f"--batch {args.batch} must be a multiple of the {nworkers} workers")
        lt.broadcast_parameters(model.state_dict(), 0, worker=worker)
        opt = lt.DistributedOptimizer(opt, model.named_parameters(), worker=worker, mode=args.mode,
                                      name="digits")
    label = "local" if args.local else f"worker {rank}/{nworkers} ({args.mode})"

    n = len(x_tr)
    part = args.batch // nworkers
    steps = n // args.batch  # the last partial batch is dropped, the same way in both setups
    epoch_times = []
    for epoch in range(args.epochs):
        t0 = time.perf_counter()
        order = torch.from_numpy(np.random.default_rng(args.seed + epoch).permutation(n))
        total = 0.0
        for s in range(steps):
            idx = order[s * args.batch + rank * part: s * args.batch + (rank + 1) * part]
            opt.zero_grad()
            loss = F.cross_entropy(model(x_tr[idx]), y_tr[idx])
            loss.backward()
            opt.step()
            total += loss.item()
        epoch_times.append(time.perf_counter() - t0)
        print(f"{label}: epoch {epoch + 1} loss {total / steps:.4f} test accuracy "
              f"{accuracy(model, x_te, y_te):.4f} ({epoch_times[-1]:.2f} s)", flush=True)

    acc = accuracy(model, x_te, y_te)
    result = {"setup": "local" if args.local else "layerps", "mode": args.mode, "workers": nworkers,
              "test_accuracy": acc, "epochs": args.epochs, "global_batch": args.batch,
              "seconds_per_epoch": sum(epoch_times) / len(epoch_times)}
    if worker is not None:
        # Every worker must hold the same weights: compare a checksum through the cluster.
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        table = worker.declare_dense("digits/check", nworkers, "sum")
        mine = np.zeros(nworkers, np.float32)
        mine[rank] = float(flat.double().sum())
        worker.push(table, mine).wait()
        opt.finish()
        worker.barrier()
        sums = worker.pull(table).wait()
        result["weights_equal_across_workers"] = bool(np.all(sums == sums[0]))
        worker.barrier()
        import layerps
        layerps.shutdown()
    print(f"{label}: final test accuracy {acc:.4f}, {result['seconds_per_epoch']:.3f} s/epoch", flush=True)
    if args.json and rank == 0:
        with open(args.json, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
