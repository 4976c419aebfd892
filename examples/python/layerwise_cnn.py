"""OptCNN's layer-wise strategies executed (layerps.placement.LayerwiseTrainer): every layer
of a CNN in the configuration a `layerps-plan --strategy=optcnn --json` report gives it
(the search's pick, or the data, model and OWT baselines), one worker per device.

    # the model's profile, then the search's report for 2 devices, batch 16 per device
    python examples/python/layerwise_cnn.py --model vgg16c --write_profile vgg16c.json
    layerps-plan --model=vgg16c.json --workers=2 --servers=1 --batch=16 --bandwidth=1Gbit \\
        --strategy=optcnn --json > report.json
    # each strategy on 2 workers (no servers: the executor uses collectives only)
    python -m layerps.launch -s 0 -w 2 -- python examples/python/layerwise_cnn.py \\
        --model vgg16c --report report.json --strategy optcnn --steps 10
    python examples/python/layerwise_cnn.py --model vgg16c --local --steps 10   # one process

Models: ``bigfc`` (the big-FC-head CNN of placement_cnn.py, 1x32x32 inputs) and ``vgg16c``
(VGG-16's thirteen convolutions for 3x32x32 inputs, as on CIFAR-10, and a 512-512-10 FC
head: by its last block the images are 2x2, so its late convolutions hold most of the
weights and few activations). The data are random tensors drawn from --seed: this program
times steps; that a step equals one process's SGD step is what the test suite checks
(tests/python/test_layerwise.py). The global batch is --batch; --json FILE writes the step
times, this worker's exchange and all-reduce bytes, and the bytes that left or reached it
from another host (LayerPS's per-peer counters).
"""

import argparse
import collections
import json
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

VGG16 = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]


def vgg16c(seed):
    torch.manual_seed(seed)
    layers, c, block, i = [], 3, 1, 1
    for v in VGG16:
        if v == "M":
            layers.append((f"pool{block}", nn.MaxPool2d(2)))
            block, i = block + 1, 1
            continue
        layers += [(f"conv{block}_{i}", nn.Conv2d(c, v, 3, padding=1)), (f"relu{block}_{i}", nn.ReLU())]
        c, i = v, i + 1
    layers += [("flat", nn.Flatten()), ("fc6", nn.Linear(512, 512)), ("relu6", nn.ReLU()),
               ("fc7", nn.Linear(512, 512)), ("relu7", nn.ReLU()), ("fc8", nn.Linear(512, 10))]
    return nn.Sequential(collections.OrderedDict(layers))


def make(name, seed):
    if name == "vgg16c":
        return vgg16c(seed), (3, 32, 32)
    from placement_cnn import big_fc_cnn
    return big_fc_cnn(seed), (1, 32, 32)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=["vgg16c", "bigfc"], default="vgg16c")
    ap.add_argument("--report", help="layerps-plan --strategy=optcnn --json output")
    ap.add_argument("--strategy", default="optcnn", help="optcnn (the search's pick), data, model or owt")
    ap.add_argument("--batch", type=int, default=32, help="global batch (default 32)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process (default 1)")
    ap.add_argument("--local", action="store_true", help="one process, plain SGD (no cluster)")
    ap.add_argument("--write_profile", metavar="FILE", help="write the model's profile for layerps-plan and exit")
    ap.add_argument("--json", metavar="FILE", help="write the results ({rank} is replaced)")
    args = ap.parse_args()
    if args.steps < 1 or args.batch < 1:
        ap.error("--steps and --batch must be positive")
    torch.set_num_threads(args.threads)
    model, sample = make(args.model, args.seed)
    if args.write_profile:
        from layerps.placement import profile
        with open(args.write_profile, "w") as f:
            json.dump(profile(model, torch.zeros((2,) + sample), name=args.model), f)
        return
    g = torch.Generator().manual_seed(args.seed + 1)
    x = torch.randn((args.batch,) + sample, generator=g)
    y = torch.randint(0, 10, (args.batch,), generator=g)
    ends, losses = [], []
    if args.local:
        opt = torch.optim.SGD(model.parameters(), lr=args.lr)
        ends.append(time.perf_counter())
        for _ in range(args.steps):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(float(loss))
            ends.append(time.perf_counter())
        result = dict(rank=0, strategy="local")
    else:
        if not args.report:
            ap.error("--report FILE (layerps-plan --strategy=optcnn --json) is needed, or --local")
        import layerps
        from layerps.placement import LayerwiseTrainer
        with open(args.report) as f:
            report = json.load(f)
        pick = report["optcnn"] if args.strategy == "optcnn" else \
            next((b for b in report["baselines"] if b["name"] == args.strategy), None)
        if pick is None:
            ap.error(f"--strategy {args.strategy}: the report has optcnn and "
                     f"{', '.join(b['name'] for b in report['baselines'])}")
        w = layerps.init()
        trainer = LayerwiseTrainer(model, pick, x, lr=args.lr, worker=w, timeout=1800)
        trainer.step(x, y)  # the first step (connections, allocations) is not timed
        start = w.traffic()
        base = dict(trainer.stats)
        ends.append(time.perf_counter())
        for _ in range(args.steps):
            losses.append(trainer.step(x, y))
            ends.append(time.perf_counter())
        traffic = w.traffic()
        nodes = {n.id: n for n in w.nodes()}

        def host(node_id):
            return nodes[node_id].endpoint.rsplit(":", 1)[0] if node_id in nodes else ""

        me = host(w.id)
        remote = sum(v["bytes_sent"] - start["peers"].get(k, {}).get("bytes_sent", 0)
                     for k, v in traffic["peers"].items() if k in nodes and host(k) != me)
        stats = {k: (trainer.stats[k] - base[k]) / args.steps for k in ("exchange_bytes", "sync_bytes", "loss_bytes")}
        result = dict(rank=w.rank, strategy=args.strategy, remote_bytes_sent_per_step=remote / args.steps, **stats,
                      configs={layer.name: "n{}c{}h{}w{}".format(*layer.degrees) for layer in trainer.layers})
    steps = [b - a for a, b in zip(ends, ends[1:])]
    result.update(model=args.model, batch=args.batch, step_seconds=steps, losses=losses)
    print(f"[{result['strategy']} rank {result['rank']}] {args.model}, batch {args.batch}: "
          f"{sum(steps) / len(steps):.4f} s/step over {len(steps)} steps, loss {losses[0]:.4f} -> {losses[-1]:.4f}",
          flush=True)
    if args.json:
        with open(args.json.replace("{rank}", str(result["rank"])), "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
