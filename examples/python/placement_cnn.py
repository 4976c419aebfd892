"""The big-FC-head CNN of layer placement (or torchvision's VGG-16, AlexNet or ResNet-18:
--model), trained on scikit-learn's digits (upsampled to 32x32), with the strategy chosen by
one flag.

    python -m layerps.launch -s 2 -w 3 -- python examples/python/placement_cnn.py --strategy=park
    python -m layerps.launch -s 2 -w 3 -- python examples/python/placement_cnn.py --strategy=stanza
    python -m layerps.launch -s 2 -w 2 -- python examples/python/placement_cnn.py --strategy=uniform
    python -m layerps.launch -s 2 -w 2 -- python examples/python/placement_cnn.py --strategy=allreduce
    python examples/python/placement_cnn.py --local          # the same training in one process

(`python` is the venv's: `source .venv/bin/activate` first, or write `.venv/bin/python`.)

- uniform: every worker trains the whole model; all of its 5.3 M parameters go through the
  parameter servers every step (data parallelism, server-side SGD).
- allreduce: data parallelism without the servers: each gradient is averaged by the ring
  all-reduce as backward produces it (DistributedOptimizer's mode 'horovod', as auto's
  runner trains the cost model's 'allreduce') and each worker steps its own SGD.
- park: the last worker rank is the PS worker that runs the FC head (it belongs beside the
  dedicated server, the last server rank); the others are conv workers whose two conv
  layers' tables are pinned to the other servers. Only conv parameters and activations
  cross the network.
- stanza: the same split step with the last worker rank as the FC node; the conv tables
  are spread over every server.

With --plan FILE (written by `layerps-plan --write_plan`: park, stanza, or the execution
plan of an OptCNN strategy, `--strategy=optcnn --optcnn_run=...`) the strategy, the cut and
the roles come from the plan: a uniform plan trains data-parallel; otherwise its conv
workers are worker ranks 0..W-1 and its suffix ranks (the PS worker, or the N_f FC nodes;
they run beside the server ranks the plan names) are the last worker ranks; launch W + N_f
workers (and give the same file to the launcher's --plan so the scheduler pins the tables
as the plan says). A plan with "fc_parallel": "channel" splits every FC layer's output
channels over the FC nodes (model parallelism) instead of replicating the FC layers.

The global batch (--batch samples, split evenly over the conv workers) and the seed are
the same in every mode, so each mode computes the same SGD steps as --local (within float
rounding). Prints the loss and test accuracy per epoch and, at the end, the bytes each
worker counted per step; --json FILE writes them.
"""

import argparse
import collections
import json
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


def big_fc_cnn(seed):
    torch.manual_seed(seed)
    return nn.Sequential(collections.OrderedDict([
        ("conv1", nn.Conv2d(1, 32, 5, padding=2)), ("relu1", nn.ReLU()), ("pool1", nn.MaxPool2d(2)),
        ("conv2", nn.Conv2d(32, 64, 5, padding=2)), ("relu2", nn.ReLU()), ("pool2", nn.MaxPool2d(2)),
        ("flat", nn.Flatten()),
        ("fc1", nn.Linear(4096, 1024)), ("relu3", nn.ReLU()),
        ("fc2", nn.Linear(1024, 1024)), ("relu4", nn.ReLU()),
        ("fc3", nn.Linear(1024, 10)),
    ]))


# The cut before the FC head: a layer of the big-FC-head CNN, or torchvision's module path
# (layerps.placement.split_model).
CUTS = {"bigfc": "fc1", "vgg16": "classifier.0", "alexnet": "classifier.0", "resnet18": "fc"}


def make_model(args):
    """The model to train: the big-FC-head CNN, or torchvision's VGG-16, AlexNet or ResNet-18
    (weights=None, 10 classes; their adaptive pooling keeps the FC heads their real size
    whatever the input size)."""
    if args.model == "bigfc":
        return big_fc_cnn(args.seed)
    import torchvision
    torch.manual_seed(args.seed)
    return getattr(torchvision.models, args.model)(weights=None, num_classes=10)


def load_data(seed, limit, size=32, channels=1):
    digits = load_digits()
    x = torch.from_numpy((digits.images / 16.0).astype(np.float32))[:, None]
    x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
    if channels > 1:
        x = x.repeat(1, channels, 1, 1)
    y = torch.from_numpy(digits.target.astype(np.int64))
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.2, random_state=seed, stratify=y)
    if limit:
        x_tr, y_tr = x_tr[:limit], y_tr[:limit]
    return x_tr, y_tr, x_te, y_te


def accuracy(model, x, y, batch_stats=False):
    """Test accuracy in evaluation mode: dropout off, batch norms on their running stats,
    or with batch_stats on the test batch's own statistics (the split step's suffix rank
    evaluates a prefix whose running stats only the conv workers kept)."""
    model.eval()
    if batch_stats:
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.train()
    with torch.no_grad():
        acc = (model(x).argmax(1) == y).float().mean().item()
    model.train()
    return acc


def batches(x, y, batch, epoch, seed):
    g = torch.Generator().manual_seed(seed * 1000 + epoch)
    order = torch.randperm(len(x), generator=g)
    for i in range(0, len(x) - batch + 1, batch):  # whole global batches only
        idx = order[i:i + batch]
        yield x[idx], y[idx]


def train_local(args, data):
    x_tr, y_tr, x_te, y_te = data
    model = make_model(args)
    print(f"strategy local: one process, the global batch of {args.batch}", flush=True)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    history = []
    for epoch in range(args.epochs):
        t0, losses = time.time(), []
        for x, y in batches(x_tr, y_tr, args.batch, epoch, args.seed):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(float(loss))
        history.append(dict(epoch=epoch, loss=float(np.mean(losses)), accuracy=accuracy(model, x_te, y_te),
                            seconds=time.time() - t0))
        print(f"epoch {epoch}: loss {history[-1]['loss']:.4f}  test accuracy {history[-1]['accuracy']:.4f}",
              flush=True)
    return dict(strategy="local", history=history)


def train_uniform(args, data, w):
    """Data parallelism: 'uniform' through the servers (every parameter on every server,
    the servers' SGD), 'allreduce' among the workers (each gradient averaged by the ring
    all-reduce from its hook during backward, as `layerps.autoplan`'s runner does for the
    allreduce strategy: DistributedOptimizer's mode 'horovod'; each worker's own SGD step,
    the servers carry nothing)."""
    import layerps.torch as lt
    x_tr, y_tr, x_te, y_te = data
    model = make_model(args)
    mode = "server" if args.strategy == "uniform" else "horovod"
    opt = lt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=args.lr), model.named_parameters(),
                                  worker=w, mode=mode, name="placement_cnn")
    n, r = w.num_workers, w.rank
    if args.batch % n:
        raise SystemExit(f"--batch={args.batch} must be a multiple of the {n} workers")
    per = args.batch // n
    if r == 0:
        where = (f"through all {w.num_servers} servers" if mode == "server"
                 else f"all-reduced among the {n} workers")
        print(f"strategy {args.strategy}: each of the {n} workers trains the whole model on {per} samples a "
              f"step; its {sum(q.numel() for q in model.parameters()):,} parameters' gradients {where}",
              flush=True)
    history, steps = [], 0
    step_ends = [time.time()]  # when training starts, then when each step ends
    start = w.traffic()  # what setting up cost is not a training step's
    for epoch in range(args.epochs):
        t0, losses = time.time(), []
        for x, y in batches(x_tr, y_tr, args.batch, epoch, args.seed):
            opt.zero_grad()
            # Each worker's mean over its share; the optimizer pushes gradient / n, so the
            # servers apply the mean over the global batch.
            loss = F.cross_entropy(model(x[r * per:(r + 1) * per]), y[r * per:(r + 1) * per])
            loss.backward()
            opt.step()
            losses.append(float(loss))
            steps += 1
            step_ends.append(time.time())
        trained = w.traffic()
        # The loss is this rank's, over its share of each global batch.
        history.append(dict(epoch=epoch, loss=float(np.mean(losses)), accuracy=accuracy(model, x_te, y_te),
                            seconds=time.time() - t0))
        if r == 0:
            print(f"epoch {epoch}: test accuracy {history[-1]['accuracy']:.4f}  ({history[-1]['seconds']:.2f} s)",
                  flush=True)
    return dict(strategy=args.strategy, history=history, steps=steps, step_ends=step_ends), start, trained


def train_split(args, data, w):
    from layerps.placement import SplitTrainer
    x_tr, y_tr, x_te, y_te = data
    model = make_model(args)
    n = w.num_workers
    cut, fc_nodes, suffix_parallel, channel_degrees = CUTS[args.model], 1, "data", None
    if args.plan:
        with open(args.plan) as f:
            plan = json.load(f)
        if plan.get("strategy") not in ("park", "stanza") or not plan.get("cut_layer"):
            raise SystemExit(f"--plan {args.plan}: a uniform plan, or a park or stanza plan with a cut, is needed")
        cut = plan["cut_layer"]
        suffix_parallel = plan.get("fc_parallel", "data")
        if suffix_parallel == "channel":
            # Each FC layer's rows on the first K FC nodes as the plan lists them; a layer
            # whose configuration is sample-parallel ("nK") runs whole on every FC node.
            channel_degrees = {l["layer"]: "replica" if l.get("config", "").startswith("n") else len(l["servers"])
                               for l in plan["layers"] if l["mode"] == "fc_node" and l["servers"]}
        fc_nodes = max(1, len(plan["roles"].get("fc_nodes") or [])) if plan["strategy"] == "stanza" else 1
        if len(plan["roles"]["conv_workers"]) + fc_nodes != n:
            raise SystemExit(f"--plan {args.plan}: it has {len(plan['roles']['conv_workers'])} conv worker(s) and "
                             f"{fc_nodes} suffix rank(s); launch {len(plan['roles']['conv_workers']) + fc_nodes} workers")
    if n < 2:
        raise SystemExit(f"--strategy={args.strategy} needs at least 2 workers (conv workers + the suffix rank)")
    conv, suffixes = list(range(n - fc_nodes)), list(range(n - fc_nodes, n))
    suffix = suffixes[-1]  # reports the loss and the accuracy
    if args.batch % len(conv):
        raise SystemExit(f"--batch={args.batch} must be a multiple of the {len(conv)} conv workers")
    per = args.batch // len(conv)
    if args.strategy == "park" and not args.plan and w.num_servers > 1 and w.rank == 0:
        # The last server is the dedicated one (the PS worker runs beside it): the conv
        # layers' tables (named by the prefix's top-level modules) go to the others.
        from layerps.placement import split_model
        others = list(range(w.num_servers - 1))
        layers = sorted({name.split(".")[0] for name, _ in split_model(model, cut)[0].named_parameters()})
        w.install_placement({layer: others for layer in layers})
    w.barrier()
    trainer = SplitTrainer(w, model, cut, F.cross_entropy, lr=args.lr, conv_workers=conv, suffix_ranks=suffixes,
                           batch=per, example_input=x_tr[:per], name="placement_cnn",
                           suffix_parallel=suffix_parallel, channel_degrees=channel_degrees)
    if w.rank == suffix:
        print(f"strategy {args.strategy}{' (plan ' + args.plan + ')' if args.plan else ''}: cut before {cut!r}; "
              f"conv workers {conv} ({per} samples each), suffix rank(s) {suffixes}"
              f"{' channel-parallel' if suffix_parallel == 'channel' else ''}; prefix tables on servers "
              f"{sorted({s for t, _ in trainer.tables for s in w.table_servers(t)})}", flush=True)
    history, steps = [], 0
    step_ends = [time.time()]  # when training starts, then when each step ends
    start = w.traffic()  # what setting up cost is not a training step's
    for epoch in range(args.epochs):
        t0, losses = time.time(), []
        for x, y in batches(x_tr, y_tr, args.batch, epoch, args.seed):
            if w.rank in suffixes:
                losses.append(trainer.step())
            else:
                k = conv.index(w.rank)
                trainer.step(x[k * per:(k + 1) * per], y[k * per:(k + 1) * per])
            steps += 1
            step_ends.append(time.time())
        entry = dict(epoch=epoch, seconds=time.time() - t0, steps=len(losses) if w.rank in suffixes else None)
        trained = w.traffic()  # the steps' traffic, without the evaluation's below
        if w.rank in suffixes:
            trainer.gather_suffix()  # channel-parallel: every FC node's rows (a collective)
        if w.rank == suffix:
            # The whole model: the prefix as the servers hold it, the suffix as trained here.
            with torch.no_grad():
                for p, v in zip(trainer.prefix.parameters(), trainer.prefix_parameters()):
                    p.copy_(v)
            entry.update(loss=float(np.mean(losses)), accuracy=accuracy(model, x_te, y_te, batch_stats=True))
            print(f"epoch {epoch}: loss {entry['loss']:.4f}  test accuracy {entry['accuracy']:.4f}  "
                  f"({entry['seconds']:.2f} s)", flush=True)
        w.barrier()  # conv workers start the next epoch once the suffix rank has evaluated
        history.append(entry)
    return dict(strategy=args.strategy, history=history, steps=steps, step_ends=step_ends), start, trained


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--strategy", default="park", choices=["uniform", "allreduce", "park", "stanza"],
                   help="uniform: data parallel through the servers; allreduce: data parallel by the "
                   "workers' ring all-reduce; park, stanza: the split step (default: park)")
    p.add_argument("--local", action="store_true", help="train in this process, without a cluster")
    p.add_argument("--model", default="bigfc", choices=sorted(CUTS),
                   help="the big-FC-head CNN (default), or torchvision's vgg16, alexnet or resnet18 (3-channel "
                   "inputs; resnet18's batch norms keep per-worker statistics under uniform)")
    p.add_argument("--size", type=int, default=0,
                   help="input height and width (default 32; alexnet needs 64 or more)")
    p.add_argument("--plan", help="a park or stanza plan (JSON from layerps-plan --write_plan): cut and roles")
    # Defaults that converge (one process: test accuracy 0.29, 0.84, 0.89, 0.96 over the
    # four epochs); lr 0.05 with batch 64 swung between 0.34 and 0.71.
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch", type=int, default=32, help="global batch per step")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--limit", type=int, default=0, help="use only the first N training samples (0: all)")
    p.add_argument("--test_limit", type=int, default=0, help="evaluate on the first N test samples (0: all)")
    p.add_argument("--json", help="write the results here (rank 0, or the suffix rank; every rank when the "
                                  "name holds {rank})")
    args = p.parse_args()
    if args.epochs < 1 or args.batch < 1 or args.lr <= 0 or args.limit < 0 or args.test_limit < 0:
        raise SystemExit("--epochs, --batch and --lr must be positive, --limit and --test_limit >= 0")
    if args.plan:
        try:
            with open(args.plan) as f:
                plan_strategy = json.load(f).get("strategy")
        except (OSError, ValueError) as e:
            raise SystemExit(f"--plan {args.plan}: {e}")
        if plan_strategy == "uniform":
            args.strategy = "uniform"
        elif args.strategy == "uniform":
            args.strategy = plan_strategy
    size = args.size or (64 if args.model == "alexnet" else 32)
    if size < (64 if args.model == "alexnet" else 32):
        raise SystemExit(f"--size={size}: {args.model} needs {64 if args.model == 'alexnet' else 32} or more")
    torch.set_num_threads(1)
    data = load_data(args.seed, args.limit, size, 1 if args.model == "bigfc" else 3)
    if args.test_limit > 0:
        data = data[:2] + (data[2][:args.test_limit], data[3][:args.test_limit])
    if args.local:
        result = train_local(args, data)
        writer = True
    else:
        import layerps
        w = layerps.init()
        t0 = time.time()
        # `traffic`: counted at the end of the last epoch's steps, before its evaluation (a
        # channel-parallel suffix gathers its weights to evaluate; with several epochs the
        # earlier epochs' gathers are counted too).
        result, start, traffic = (train_uniform if args.strategy in ("uniform", "allreduce") else train_split)(args, data, w)
        steps = max(result["steps"], 1)
        workers = {n.id for n in w.nodes() if n.role == layerps._core.Role.WORKER}

        def moved(now, before, keys):
            return sum(v[k] - before.get(key, {}).get(k, 0) for key, v in now.items() for k in keys)

        both = ("bytes_sent", "bytes_received")
        ps = moved(traffic["tables"], start["tables"], both)
        to_workers = {k: v for k, v in traffic["peers"].items() if k in workers}
        peer = moved(to_workers, start["peers"], both) - 64 * moved(to_workers, start["peers"],
                                                                    ("messages_sent", "messages_received"))
        total = moved(traffic["peers"], start["peers"], both)
        # Bytes that crossed to or from another host (by the peers' endpoint addresses): what
        # this worker sent to any remote peer, and what it received from remote servers (the
        # servers' own sends; a worker's sends are counted by the sender).
        nodes = {n.id: n for n in w.nodes()}

        def host(node_id):
            endpoint = nodes[node_id].endpoint if node_id in nodes else ""
            return endpoint.rsplit(":", 1)[0]

        me = host(w.id)
        remote = 0
        for key, v in traffic["peers"].items():
            if key in nodes and host(key) != me:
                before = start["peers"].get(key, {})
                remote += v["bytes_sent"] - before.get("bytes_sent", 0)
                if key not in workers:
                    remote += v["bytes_received"] - before.get("bytes_received", 0)
        ends = result.pop("step_ends")
        durations = [b - a for a, b in zip(ends, ends[1:])]
        result.update(rank=w.rank, seconds=time.time() - t0, ps_payload_bytes_per_step=ps / steps,
                      remote_bytes_per_step=remote / steps, step_seconds=durations,
                      peer_payload_bytes_per_step=peer / steps, all_bytes_per_step=total / steps)
        print(f"[rank {w.rank}] per step: {ps / steps / 1e6:.3f} MB of table payload to/from the servers, "
              f"{peer / steps / 1e6:.3f} MB to/from other workers (activations, or the all-reduce), {total / steps / 1e6:.3f} MB in all "
              "(with headers and control)", flush=True)
        writer = (w.rank == 0) if args.strategy in ("uniform", "allreduce") else (w.rank == w.num_workers - 1)
        if args.json and "{rank}" in args.json:
            writer = True
        layerps.shutdown()
    if args.json and writer:
        with open(args.json.format(rank=result.get("rank", 0)), "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
