"""One worker of the algorithm comparison (bench/ALGORITHMS.md): trains the digits CNN (38 k
parameters, or 1.08 M as digits_wide) or the big-FC-head CNN with one of the seven algorithms through
layerps.torch.DistributedOptimizer(algorithm=...), and writes per-worker JSON: test
accuracy (at the end, and after every epoch with the training seconds so far, for
time-to-accuracy), seconds per epoch, bytes this worker exchanged with each peer (counted
by the worker, headers included) and the peers' roles. Run by bench/algorithms_table.py.

Ko et al.'s conditions: ``--straggler R --slowdown F`` makes worker R F times slower (it
sleeps F - 1 times its own forward, backward and step after each step), and
``--warmup_steps``, ``--decay``, ``--gamma``, ``--decay_every`` switch the trainer's
learning-rate warm-up and decay on (DistributedOptimizer's arguments of those names).

Time to accuracy with a time budget: ``--eval_every_s E`` records the test accuracy of
this worker's model after every E seconds of its training time (steps and a straggler's
sleep; the evaluations themselves left out), and ``--time_budget_s S`` (the asynchronous
algorithms only: asp, easgd, gosgd, adpsgd) trains until S seconds of training time
instead of for --epochs, so that a fast worker makes more steps than a slow one.

    python bench/algorithms_train.py --algorithm 'ssp(s=2)' --model digits --epochs 4 \
        --seed 0 --json out-{rank}.json      # under layerps-launch / a LAYERPS_* environment
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples", "python"))

import digits_cnn  # noqa: E402
import placement_cnn  # noqa: E402


# The algorithms whose workers may stop after different numbers of steps (a time budget):
# nothing waits for a given step of another worker.
ASYNCHRONOUS = ("asp", "easgd", "gosgd", "adpsgd")


def load(model, seed, limit):
    if model in ("digits", "digits_wide"):
        torch.manual_seed(seed)
        net = digits_cnn.Net() if model == "digits" else digits_cnn.Net(32, 64, 1024)
        x_tr, y_tr, x_te, y_te = digits_cnn.load_data(0)  # one split for every seed
    else:
        net = placement_cnn.big_fc_cnn(seed)
        x_tr, y_tr, x_te, y_te = placement_cnn.load_data(0, limit)
    return net, (x_tr, y_tr, x_te, y_te)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--algorithm", required=True)
    p.add_argument("--model", choices=["digits", "digits_wide", "bigfc"], default="digits")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch", type=int, default=64, help="global batch, split over the workers")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--limit", type=int, default=0, help="training samples (0: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", required=True, help="output path; {rank} is replaced")
    p.add_argument("--straggler", type=int, default=-1, help="this worker rank runs --slowdown times slower")
    p.add_argument("--slowdown", type=float, default=2.0, help="the straggler's factor (>= 1)")
    p.add_argument("--warmup_steps", type=int, default=0, help="linear learning-rate warm-up over this many steps")
    p.add_argument("--decay", default="none", choices=["none", "step", "exponential", "cosine"])
    p.add_argument("--gamma", type=float, default=0.1,
                   help="decay factor: per --decay_every steps (step), per step (exponential)")
    p.add_argument("--decay_every", type=int, default=0,
                   help="steps between step decays; cosine: its period (0: the run's steps)")
    p.add_argument("--eval_every_s", type=float, default=0.0,
                   help="record the test accuracy after every this many seconds of training time")
    p.add_argument("--time_budget_s", type=float, default=0.0,
                   help="train until this many seconds of training time (asynchronous algorithms only)")
    p.add_argument("--trace", help="rank 0 writes its parameters after every step here (.npy, "
                   "steps x parameters, float32): bench/algorithms_divergence.py compares two")
    args = p.parse_args()
    if args.slowdown < 1:
        p.error("--slowdown must be >= 1")
    if args.decay == "step" and args.decay_every < 1:
        p.error("--decay step needs --decay_every >= 1")
    if args.time_budget_s < 0 or args.eval_every_s < 0:
        p.error("--time_budget_s and --eval_every_s must be >= 0")
    if args.time_budget_s > 0 and args.algorithm.split("(")[0].strip().lower() not in ASYNCHRONOUS:
        p.error(f"--time_budget_s needs an asynchronous algorithm ({', '.join(ASYNCHRONOUS)}): "
                "the workers of a synchronous one must all make the same steps")

    import layerps
    from layerps.torch import DistributedOptimizer

    torch.set_num_threads(1)
    w = layerps.init()
    rank, world = w.rank, w.num_workers
    net, (x_tr, y_tr, x_te, y_te) = load(args.model, args.seed, args.limit)
    if args.decay == "cosine" and args.decay_every < 1:
        args.decay_every = args.epochs * (len(x_tr) // args.batch)  # over the whole run
    opt = DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=args.lr, momentum=args.momentum),
                               net.named_parameters(), worker=w, algorithm=args.algorithm,
                               name=f"bench-{args.model}", seed=args.seed, timeout=600,
                               warmup_steps=args.warmup_steps, decay=args.decay, gamma=args.gamma,
                               decay_every=args.decay_every)
    slow = rank == args.straggler and args.slowdown > 1
    part = args.batch // world
    steps = len(x_tr) // args.batch
    epoch_seconds, losses, trace, accuracy_per_epoch, elapsed = [], [], [], [], []
    checkpoints = []  # [training seconds, test accuracy] every --eval_every_s
    train_seconds, steps_done, next_checkpoint = 0.0, 0, args.eval_every_s
    budget = args.time_budget_s

    def accuracy():
        with torch.no_grad():
            return float((net(x_te).argmax(1) == y_te).float().mean())

    epoch, out_of_time = 0, False
    while (epoch < args.epochs) if budget <= 0 else not out_of_time:
        t0, total, done = time.perf_counter(), 0.0, 0
        order = torch.from_numpy(np.random.default_rng(args.seed * 100 + epoch).permutation(len(x_tr)))
        for s in range(steps):
            idx = order[s * args.batch + rank * part: s * args.batch + (rank + 1) * part]
            c0 = time.perf_counter()
            opt.zero_grad()
            loss = F.cross_entropy(net(x_tr[idx]), y_tr[idx])
            loss.backward()
            opt.step()
            if slow:  # a straggler: its step takes slowdown x as long
                time.sleep((args.slowdown - 1) * (time.perf_counter() - c0))
            train_seconds += time.perf_counter() - c0
            steps_done += 1
            done += 1
            total += float(loss)
            if args.trace and rank == 0:
                trace.append(torch.cat([q.detach().reshape(-1) for q in net.parameters()]).numpy().copy())
            e0 = time.perf_counter()
            while args.eval_every_s > 0 and train_seconds >= next_checkpoint:
                checkpoints.append([round(next_checkpoint, 6), accuracy()])
                next_checkpoint += args.eval_every_s
            t0 += time.perf_counter() - e0  # evaluations are not training time
            if budget > 0 and train_seconds >= budget:
                out_of_time = True
                break
        if done < steps:  # a time budget ended inside this epoch
            break
        epoch_seconds.append(time.perf_counter() - t0)
        losses.append(total / max(steps, 1))
        elapsed.append(sum(epoch_seconds))  # training time so far, evaluations left out
        accuracy_per_epoch.append(accuracy())
        epoch += 1
    opt.finish()
    if args.trace and rank == 0:
        np.save(args.trace, np.stack(trace))
    with torch.no_grad():
        acc = float((net(x_te).argmax(1) == y_te).float().mean())
    traffic = w.traffic()
    roles = {n.id: str(n.role).split(".")[-1].lower() for n in w.nodes()}
    result = dict(rank=rank, workers=world, algorithm=opt.trainer.algorithm, model=args.model,
                  seed=args.seed, epochs=args.epochs, steps_per_epoch=steps, test_accuracy=acc,
                  losses=losses,
                  seconds_per_epoch=(train_seconds * steps / steps_done if budget > 0 and steps_done
                                     else float(np.mean(epoch_seconds))),
                  steps_done=steps_done, train_seconds=train_seconds, time_budget_s=budget,
                  eval_every_s=args.eval_every_s, checkpoints=checkpoints,
                  accuracy_per_epoch=accuracy_per_epoch, elapsed_seconds=elapsed,
                  straggler=args.straggler, slowdown=args.slowdown, warmup_steps=args.warmup_steps,
                  decay=args.decay, decay_every=args.decay_every,
                  peers={str(k): dict(v, role=roles.get(k, "?")) for k, v in traffic["peers"].items()},
                  trainer=opt.trainer.stats())
    with open(args.json.replace("{rank}", str(rank)), "w") as f:
        json.dump(result, f)
    layerps.shutdown()


if __name__ == "__main__":
    main()
