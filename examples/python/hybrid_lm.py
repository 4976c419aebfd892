"""A word-level language model on generated Zipf text, trained with the sparsity-aware
hybrid (--mode=hybrid), everything through the servers (--mode=ps) or everything through
the all-reduce (--mode=allreduce: the embeddings' gradients densified); --mode=allgather
sends the embeddings' gradient rows to every worker instead.

The model (CBOW with negative sampling, plus a dense MLP): the mean of the context words'
input embeddings (nn.EmbeddingBag, sparse) goes through an MLP (dense) and is scored by
dot product against the output embedding (nn.Embedding, sparse) of the next word and of
K sampled words; --model lstm reads the context in order through an LSTM instead of the
mean and the MLP (a recurrent dense part, --hidden wide). --tie makes the two embeddings
one table (half the memory: Parallax's 800k x 512 vocabulary on 8 workers of one host,
bench/HYBRID.md). The text: word ids drawn from a Zipf law over the vocabulary, and with
probability 0.6 the next word is a fixed successor of the previous one (learnable).
Every step draws one global batch from (seed, step); worker r trains on its share, so the
loss does not depend on the mode or on the number of workers.

    python -m layerps.launch -s 2 -w 2 -- python examples/python/hybrid_lm.py --mode hybrid
    python examples/python/hybrid_lm.py --local        # one process, the global batch

(`python` is the venv's: `source .venv/bin/activate` first, or write `.venv/bin/python`.)

--json FILE (rank 0; FILE may contain {rank} for every rank's) writes the losses, the
step times and the bytes this worker moved per step with each peer.
"""

import argparse
import json
import resource
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class ZipfText:
    """Windows of generated text: (context ids, next word, negatives) per example."""

    def __init__(self, vocab, exponent, seed):
        rng = np.random.default_rng(seed)
        p = 1.0 / np.arange(1, vocab + 1) ** exponent
        self.cdf = np.cumsum(p / p.sum())
        self.successor = rng.permutation(vocab)
        self.vocab = vocab
        self.seed = seed

    def draw(self, rng, shape):
        return np.minimum(np.searchsorted(self.cdf, rng.random(shape)), self.vocab - 1)

    def batch(self, step, n, context, negatives):
        rng = np.random.default_rng([self.seed, step])
        words = np.empty((n, context + 1), dtype=np.int64)
        words[:, 0] = self.draw(rng, n)
        for j in range(1, context + 1):
            follow = rng.random(n) < 0.6
            words[:, j] = np.where(follow, self.successor[words[:, j - 1]], self.draw(rng, n))
        targets = np.concatenate([words[:, -1:], self.draw(rng, (n, negatives))], axis=1)
        return torch.from_numpy(words[:, :-1]), torch.from_numpy(targets)


def output_embedding(inp, tie):
    """nn.Embedding for the output side; tied (--tie), its weight is the input's own
    Parameter (one table, one sparse gradient with both lookups' rows)."""
    vocab, dim = inp.weight.shape
    if not tie:
        return nn.Embedding(vocab, dim, sparse=True)
    out = nn.Embedding(vocab, dim, sparse=True, _weight=inp.weight.detach())  # no second table
    out.weight = inp.weight
    return out


def init_embeddings(model, g):
    with torch.no_grad():
        if model.out.weight is model.inp.weight:
            model.inp.weight.uniform_(-0.1, 0.1, generator=g)
        else:
            model.inp.weight.uniform_(-0.5, 0.5, generator=g)
            model.out.weight.uniform_(-0.1, 0.1, generator=g)


class CBOW(nn.Module):
    def __init__(self, vocab, dim, hidden, seed, tie=False):
        super().__init__()
        self.inp = nn.EmbeddingBag(vocab, dim, mode="mean", sparse=True)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.Tanh(), nn.Linear(hidden, dim))
        self.out = output_embedding(self.inp, tie)
        g = torch.Generator().manual_seed(seed)
        init_embeddings(self, g)
        with torch.no_grad():
            for p in self.mlp.parameters():
                p.uniform_(-1.0 / p.shape[-1] ** 0.5, 1.0 / p.shape[-1] ** 0.5, generator=g)

    def dense_parameters(self):
        return list(self.mlp.parameters())

    def forward(self, context, targets):
        return score(self.out, self.mlp(self.inp(context)), targets)


class LstmLM(nn.Module):
    """The same task with a recurrent dense part: the context words' input embeddings
    (nn.Embedding, sparse) in order through an LSTM; its last state, projected to the
    embedding width, is scored against the output embeddings (sparse) as CBOW's is."""

    def __init__(self, vocab, dim, hidden, seed, tie=False):
        super().__init__()
        self.inp = nn.Embedding(vocab, dim, sparse=True)
        self.lstm = nn.LSTM(dim, hidden, batch_first=True)
        self.proj = nn.Linear(hidden, dim)
        self.out = output_embedding(self.inp, tie)
        g = torch.Generator().manual_seed(seed)
        init_embeddings(self, g)
        with torch.no_grad():
            for p in self.dense_parameters():
                p.uniform_(-1.0 / hidden ** 0.5, 1.0 / hidden ** 0.5, generator=g)

    def dense_parameters(self):
        return list(self.lstm.parameters()) + list(self.proj.parameters())

    def forward(self, context, targets):
        states, _ = self.lstm(self.inp(context))
        return score(self.out, self.proj(states[:, -1]), targets)


def score(out, h, targets):
    """Negative sampling: targets[:, 0] is the next word, the rest are sampled words."""
    logits = (out(targets) * h[:, None, :]).sum(-1)
    labels = torch.zeros_like(logits)
    labels[:, 0] = 1.0
    return F.binary_cross_entropy_with_logits(logits, labels)


MODELS = {"cbow": CBOW, "lstm": LstmLM}


def make_optimizer(model, args):
    embeddings = [model.inp.weight] + ([] if model.out.weight is model.inp.weight else [model.out.weight])
    groups = [{"params": embeddings, "lr": args.embedding_lr},
              {"params": model.dense_parameters(), "lr": args.lr}]
    if args.optimizer == "adagrad":
        return torch.optim.Adagrad(groups, lr=args.lr, eps=1e-10)
    return torch.optim.SGD(groups, lr=args.lr)


def moved(now, start):
    """Bytes (sent + received) per peer since ``start``."""
    out = {}
    for peer, t in now.items():
        s = start.get(peer, {})
        out[int(peer)] = (t["bytes_sent"] - s.get("bytes_sent", 0)) + (t["bytes_received"] - s.get("bytes_received", 0))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=["hybrid", "ps", "allreduce", "allgather"], default="hybrid")
    p.add_argument("--local", action="store_true", help="one process, plain torch, the global batch")
    p.add_argument("--model", choices=sorted(MODELS), default="cbow",
                   help="cbow: context mean through an MLP; lstm: the context in order through an LSTM "
                   "(--hidden is the MLP's or the LSTM's width)")
    p.add_argument("--vocab", type=int, default=20000)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--tie", action="store_true",
                   help="one embedding table for the context and the scored words (half the memory)")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--context", type=int, default=4)
    p.add_argument("--negatives", type=int, default=8)
    p.add_argument("--zipf", type=float, default=1.1, help="exponent of the word frequencies")
    p.add_argument("--batch", type=int, default=256, help="global batch (split over the workers)")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=3, help="steps left out of the timing and byte counts")
    p.add_argument("--optimizer", choices=["sgd", "adagrad"], default="sgd")
    p.add_argument("--lr", type=float, default=0.2, help="the MLP's")
    p.add_argument("--embedding_lr", type=float, default=8.0)
    p.add_argument("--hosts", default="auto",
                   help="'auto' (registered hostnames), 'rank' (every worker its own host) or N (N workers a host)")
    p.add_argument("--host_pulls", action="store_true",
                   help="a host's leader pulls the union of its workers' rows once (with local aggregation)")
    p.add_argument("--partitions", default=None, help="P per embedding, or 'auto' for the partition search")
    p.add_argument("--p_max", type=int, default=None, help="the partition search's upper bound")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json")
    args = p.parse_args()

    torch.set_num_threads(1)
    text = ZipfText(args.vocab, args.zipf, args.seed)
    model = MODELS[args.model](args.vocab, args.dim, args.hidden, args.seed, args.tie)  # every worker the same start
    opt = make_optimizer(model, args)
    result = {"mode": "local" if args.local else args.mode, "model": args.model, "vocab": args.vocab,
              "dim": args.dim, "dense_params": sum(p.numel() for p in model.dense_parameters()),
              "sparse_params": {n: model.inp.weight.numel() for n in (["inp.weight"] if args.tie else
                                                                        ["inp.weight", "out.weight"])},
              "tie": args.tie}
    worker = None
    rank, nworkers = 0, 1
    if not args.local:
        import layerps
        import layerps.torch as lt
        worker = layerps.init()
        rank, nworkers = worker.rank, worker.num_workers
        if args.batch % nworkers:
            raise SystemExit(f"--batch {args.batch} is not a multiple of the {nworkers} workers")
        hosts = None
        if args.hosts == "rank":
            hosts = list(range(nworkers))
        elif args.hosts != "auto":
            hosts = [r // int(args.hosts) for r in range(nworkers)]
        mode, routes = args.mode, None
        if args.mode == "allgather":
            mode, routes = "allreduce", {n: "allgather" for n in result["sparse_params"]}
        partitions = None if args.partitions in (None, "auto") else int(args.partitions)
        t_construct = time.perf_counter()
        opt = lt.DistributedOptimizer(opt, model.named_parameters(), worker=worker, mode=mode, routes=routes,
                                      hosts=hosts, partitions=partitions, host_pulls=args.host_pulls,
                                      name=f"hybrid_lm/{args.mode}")
        result["construct_seconds"] = time.perf_counter() - t_construct  # the start's broadcast
    share = args.batch // nworkers

    def train_step(step):
        ctx, tgt = text.batch(step, args.batch, args.context, args.negatives)
        ctx, tgt = ctx[rank * share:(rank + 1) * share], tgt[rank * share:(rank + 1) * share]
        opt.zero_grad()
        loss = model(ctx, tgt)
        loss.backward()
        opt.step()
        rows = [ctx.unique().numel(), tgt.unique().numel()]
        return loss.item(), rows

    losses, times, touched = [], [], []
    start_traffic = None
    step = 0
    if args.partitions == "auto" and not args.local:
        losses.append(train_step(step)[0])  # the first step routes the parameters
        step += 1
        trial_steps = [step]

        def trial():
            losses.append(train_step(trial_steps[0])[0])
            trial_steps[0] += 1

        pick, history = opt.search_partitions(trial, steps=3, warmup=1, p_max=args.p_max)
        step = trial_steps[0]
        result["partition_search"] = {"pick": pick, "history": history}
        if rank == 0:
            print(f"partition search: P = {pick} from {history}", flush=True)
    t_start = None
    measure_from = max(step, args.warmup)
    while step < args.steps:
        if step == measure_from:
            if worker is not None:
                worker.barrier()
                start_traffic = worker.traffic()
            t_start = time.perf_counter()
        t0 = time.perf_counter()
        loss, rows = train_step(step)
        times.append(time.perf_counter() - t0)
        losses.append(loss)
        if step >= measure_from:
            touched.append(rows)
        if rank == 0 and step % 20 == 0:
            print(f"{result['mode']}: step {step} loss {loss:.4f}", flush=True)
        step += 1
    measured = max(1, args.steps - measure_from)
    elapsed = time.perf_counter() - t_start if t_start is not None else 0.0
    if worker is not None:
        worker.barrier()
        elapsed_all = time.perf_counter() - t_start if t_start is not None else 0.0
        traffic = worker.traffic()
        result["bytes_per_step_by_peer"] = {k: v / measured for k, v in
                                            moved(traffic["peers"], start_traffic["peers"]).items()}
        result["nodes"] = {int(n.id): [str(n.role).split(".")[-1].lower(), int(n.rank)] for n in worker.nodes()}
        result["rank"], result["workers"], result["servers"] = rank, nworkers, worker.num_servers
        result["routes"] = opt.routes
        result["partitions"] = opt.partitions if opt.hybrid is not None else {}
        result["seconds_per_step_with_barrier"] = elapsed_all / measured
    # A fixed evaluation batch (the same for every mode): the loss after training.
    ctx, tgt = text.batch(10 ** 6, 1024, args.context, args.negatives)
    with torch.no_grad():
        eval_loss = float(model(ctx, tgt))
    if worker is not None:
        opt.finish()
        worker.barrier()
    a = np.array(touched, dtype=float).mean(0) if touched else np.zeros(2)
    result.update(losses=losses, eval_loss=eval_loss, seconds_per_step=elapsed / max(1, measured),
                  step_seconds=times, alpha={"inp.weight": a[0] / args.vocab, "out.weight": a[1] / args.vocab},
                  rows_per_step={"inp.weight": a[0], "out.weight": a[1]}, measured_steps=measured,
                  batch=args.batch, steps=args.steps, seed=args.seed, optimizer=args.optimizer,
                  max_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(f"{result['mode']} rank {rank}: loss {np.mean(losses[:5]):.4f} -> {np.mean(losses[-5:]):.4f}, eval "
          f"{eval_loss:.4f}, {result['seconds_per_step'] * 1e3:.1f} ms/step, alpha in {result['alpha']['inp.weight']:.4f} "
          f"out {result['alpha']['out.weight']:.4f}", flush=True)
    if worker is not None:
        import layerps
        layerps.shutdown()
    if args.json and ("{rank}" in args.json or rank == 0):
        with open(args.json.format(rank=rank), "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
