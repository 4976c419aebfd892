"""Step time of layerps.torch.DistributedOptimizer with each gradient's communication
started from its backward hook (overlap=True) against all of it started from step()
(overlap=False), on an MLP whose communication is comparable to its backward. --mode
aggregate (default): pushes to the servers' sum tables and pulls; --mode horovod: Horovod's
all-reduce of every gradient among the workers (the typed collectives).

Run under the launcher (every worker runs this script), e.g. on one machine:

  PYTHONPATH=build-dev/bindings/python /usr/bin/python3 -m layerps.launch -s 1 -w 2 -- \\
      /usr/bin/python3 bench/overlap_bench.py --layers 8 --width 1024 --batch 64 --steps 20

The two settings alternate in blocks (A B A B ...) so that drift of a shared machine hits
both; each block has its own optimizer (tables) and a warm-up step. Rank 0 prints one JSON
line: mean and median seconds per step (each step's time averaged over the workers with an
all-reduce) for each setting, and rank 0's forward+backward time alone (no communication).
"""

import argparse
import json
import statistics
import time

import torch

import layerps
import layerps.torch as lt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=20, help="timed steps per block")
    ap.add_argument("--blocks", type=int, default=3, help="blocks per setting (alternating)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per worker")
    ap.add_argument("--mode", default="aggregate", choices=["aggregate", "horovod"])
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    w = layerps.init()
    torch.manual_seed(0)
    layers = []
    for _ in range(a.layers):
        layers += [torch.nn.Linear(a.width, a.width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers[:-1])
    lt.broadcast_parameters(model.state_dict(), 0, worker=w)
    g = torch.Generator().manual_seed(w.rank)
    x = torch.randn(a.batch, a.width, generator=g)
    y = torch.randn(a.batch, a.width, generator=g)

    def compute_only(n):
        t0 = time.perf_counter()
        for _ in range(n):
            model.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
        return (time.perf_counter() - t0) / n

    def block(overlap, k):
        opt = lt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1e-4), model.named_parameters(),
                                      worker=w, mode=a.mode, name=f"ovl{int(overlap)}_{k}", overlap=overlap)
        times = []
        for step in range(a.steps + 1):
            t0 = time.perf_counter()
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            if step > 0:  # the first is a warm-up
                times.append(time.perf_counter() - t0)
        opt.finish()
        w.barrier("workers")
        t = torch.tensor(times, dtype=torch.float32)
        w.allreduce(t)  # every step's sum over the workers
        return [float(v) / w.num_workers for v in t]

    compute = compute_only(5)
    res = {True: [], False: []}
    for k in range(a.blocks):
        for overlap in (False, True):
            res[overlap] += block(overlap, k)
    w.barrier("workers")
    if w.rank == 0:
        params = sum(p.numel() for p in model.parameters())
        out = {
            "mode": a.mode, "workers": w.num_workers, "servers": w.num_servers, "layers": a.layers,
            "width": a.width,
            "batch": a.batch, "params": params, "grad_bytes_per_step": 4 * params,
            "torch_threads": a.threads, "compute_only_s": compute,
            "overlap_off_mean_s": statistics.mean(res[False]), "overlap_off_median_s": statistics.median(res[False]),
            "overlap_on_mean_s": statistics.mean(res[True]), "overlap_on_median_s": statistics.median(res[True]),
        }
        out["speedup_median"] = out["overlap_off_median_s"] / out["overlap_on_median_s"]
        print(json.dumps(out), flush=True)
    layerps.shutdown()


if __name__ == "__main__":
    main()
