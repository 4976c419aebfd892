"""Why two algorithms that compute the same steps end with different models: compares the
parameter trajectories of two runs of bench/algorithms_table.py (rank 0's parameters after
every step, written with --trace_dir), and, as a control, two one-process runs of the same
SGD whose only difference is the order in which the global batch's gradient is summed.

BSP sums the workers' scaled gradients on the servers and applies momentum there; AR-SGD
sums them by ring all-reduce and applies momentum on each worker. In exact arithmetic both
are one-process SGD with the global batch; in float32 the sums round differently. This
script shows how far apart the trajectories are after each epoch, and whether a
difference of the same kind in one process (summing four quarter-batch means instead of
taking the mean of the batch) grows the same way on the same seed.

    python bench/algorithms_table.py --model digits --epochs 6 --seeds 0,1,2 \\
        --algorithms 'bsp;arsgd' --trace_dir /tmp/traces
    python bench/algorithms_divergence.py --trace_dir /tmp/traces --seeds 0,1,2
"""

import argparse
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples", "python"))

import digits_cnn  # noqa: E402


def flat(net):
    return torch.cat([q.detach().reshape(-1) for q in net.parameters()]).numpy().copy()


def load_flat(net, vec):
    with torch.no_grad():
        at = 0
        for q in net.parameters():
            q.copy_(torch.from_numpy(vec[at:at + q.numel()]).reshape(q.shape))
            at += q.numel()


def accuracy(vec, data):
    net = digits_cnn.Net()
    load_flat(net, vec)
    _, _, x_te, y_te = data
    with torch.no_grad():
        return float((net(x_te).argmax(1) == y_te).float().mean())


def one_process(seed, epochs, batch, lr, momentum, quarters, data):
    """One-process SGD in algorithms_train.py's batch order; the gradient of each global batch
    is its mean (quarters=False) or the mean of its four quarters' means, summed in rank
    order (quarters=True), which is what the four workers' gradients add up to."""
    torch.manual_seed(seed)
    net = digits_cnn.Net()
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum)
    x_tr, y_tr, _, _ = data
    steps = len(x_tr) // batch
    trace = []
    for epoch in range(epochs):
        order = torch.from_numpy(np.random.default_rng(seed * 100 + epoch).permutation(len(x_tr)))
        for s in range(steps):
            idx = order[s * batch:(s + 1) * batch]
            opt.zero_grad()
            if quarters:
                part = batch // 4
                grads = []
                for r in range(4):
                    net.zero_grad()
                    F.cross_entropy(net(x_tr[idx[r * part:(r + 1) * part]]),
                                    y_tr[idx[r * part:(r + 1) * part]]).backward()
                    grads.append([q.grad.clone() for q in net.parameters()])
                for i, q in enumerate(net.parameters()):
                    q.grad = ((grads[0][i] + grads[1][i]) + grads[2][i] + grads[3][i]) * 0.25
            else:
                F.cross_entropy(net(x_tr[idx]), y_tr[idx]).backward()
            opt.step()
            trace.append(flat(net))
    return np.stack(trace)


def report(label, a, b, steps_per_epoch, data):
    norm = np.linalg.norm(a, axis=1)
    rel = np.linalg.norm(a - b, axis=1) / norm
    first = next((i for i, r in enumerate(rel) if r > 0), None)
    per_epoch = " ".join(f"{rel[(e + 1) * steps_per_epoch - 1]:.1e}"
                         for e in range(len(rel) // steps_per_epoch))
    print(f"{label:34} first differs at step {first}; ||a-b||/||a|| after each epoch: {per_epoch}; "
          f"test accuracy {accuracy(a[-1], data):.4f} vs {accuracy(b[-1], data):.4f}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace_dir", required=True, help="the --trace_dir of bench/algorithms_table.py")
    p.add_argument("--a", default="bsp", help="first algorithm (its trace file's prefix)")
    p.add_argument("--b", default="arsgd", help="second algorithm")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    args = p.parse_args()
    torch.set_num_threads(1)
    data = digits_cnn.load_data(0)
    steps_per_epoch = len(data[0]) // args.batch
    for seed in (int(s) for s in args.seeds.split(",")):
        paths = [os.path.join(args.trace_dir, f"{alg}-seed{seed}.npy") for alg in (args.a, args.b)]
        missing = [q for q in paths if not os.path.exists(q)]
        if missing:
            raise SystemExit(f"algorithms_divergence: no trace {missing[0]} (run algorithms_table.py "
                             f"with --trace_dir {args.trace_dir} and algorithms '{args.a};{args.b}')")
        a, b = (np.load(q) for q in paths)
        if a.shape != b.shape:
            raise SystemExit(f"algorithms_divergence: traces of different shapes {a.shape} and {b.shape}")
        report(f"seed {seed}: {args.a} vs {args.b}", a, b, steps_per_epoch, data)
        whole = one_process(seed, args.epochs, args.batch, args.lr, args.momentum, False, data)
        quarters = one_process(seed, args.epochs, args.batch, args.lr, args.momentum, True, data)
        report(f"seed {seed}: 1 process, mean vs quarters", whole, quarters, steps_per_epoch, data)
        report(f"seed {seed}: {args.b} vs 1 process (quarters)", b, quarters, steps_per_epoch, data)


if __name__ == "__main__":
    main()
