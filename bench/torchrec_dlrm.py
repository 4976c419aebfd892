#!/usr/bin/env python3
"""DLRM trained with TorchRec's DistributedModelParallel on CPU (gloo): the TorchRec
baseline to compare LayerPS against (bench/RECSYS.md).

Needs the venv made by bench/torchrec_env.sh (torch 2.14.1, fbgemm-gpu-cpu 1.9.0,
torchrec 1.9.2):

    bash bench/torchrec_env.sh
    .venv-torchrec/bin/python bench/torchrec_dlrm.py --world 2 --steps 50 --batch 256

W worker processes on this machine (torch.multiprocessing.spawn), gloo over loopback.

Data: synthetic Criteo-shaped clicks, a function of --seed: 13 dense features, 26 sparse
features with one id each and its own table, Criteo Kaggle's cardinalities (3 .. 10.1M)
capped at --max_rows, power-law (Zipf) ids, labels from a hidden logistic model of the
dense features and one hidden weight per id. With --data auto (default) the samples come
from examples/python/criteo_synth.py when it is there (the generator the LayerPS side
uses: same samples for the same seed, step and sample index); each hashed id is mapped
back to its popularity rank, which is its row in the feature's table (no collisions).
Otherwise (--data builtin) a small generator here with the same recipe is used (not the
same samples). Worker r's batch at step s is the global batch's samples
[r*B, (r+1)*B) of step s; the held-out set is step --eval_step (never trained on).
All batches are generated before the timed loop (generation is not timed).

Model: torchrec.models.dlrm.DLRM over an EmbeddingBagCollection (one EmbeddingBagConfig
per feature, dim 16, sum pooling): bottom MLP 13->512->256->64->16, interaction, top MLP
->512->256->1. Tables: fused row-wise Adagrad (torchrec RowWiseAdagrad via
apply_optimizer_in_backward -> FBGEMM EmbOptimType.EXACT_ROWWISE_ADAGRAD), sharded by
TorchRec's EmbeddingShardingPlanner (or --sharding; on CPU TorchRec 1.9 shards tables only
data-parallel, table-wise or column-wise: row-wise is for cuda/tpu); dense part: torch.optim.Adagrad,
data-parallel (DDP inside DMP).

Measured: samples/s over the timed steps (after --warmup), peak RSS per process
(getrusage ru_maxrss), log loss and AUC (numpy) on the held-out set before and after
training, and bytes per step two ways:
  * wire: the loopback interface's tx_bytes (/proc/net/dev) over the timed steps. By
    default the workers run in a private network namespace (unshare --net, needs root),
    so lo carries only their traffic; a byte sent over loopback is one tx byte and one rx
    byte on lo: we count tx only. Includes TCP/IP headers, gloo's own messages and the
    ACKs. With --netns off it counts the whole machine's loopback traffic.
  * payload: the bytes this rank's collectives hand to other ranks, counted by wrapping
    torch.distributed's Python collectives (TorchRec's all-to-alls call them), plus the
    DDP gradient all-reduce (C++, not wrapped: counted as the dense gradients' size,
    i.e. the all-reduce's input, not what its algorithm moves).
"""

import argparse
import json
import os
import platform
import resource
import shutil
import socket
import subprocess
import sys
import time
import warnings

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NETNS_ENV = "TORCHREC_DLRM_IN_NETNS"
CRITEO_CARDINALITIES = (1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683,
                        8351593, 3194, 27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15,
                        286181, 105, 142572)
NUM_DENSE, NUM_SPARSE = 13, 26
FEATURES = tuple(f"C{i + 1}" for i in range(NUM_SPARSE))


def ints(s):
    return [int(x) for x in s.split(",") if x]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world", type=int, default=2, help="worker processes (W)")
    p.add_argument("--steps", type=int, default=50, help="timed steps")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps before them")
    p.add_argument("--batch", type=int, default=256, help="samples per worker per step")
    p.add_argument("--max_rows", type=int, default=100000,
                   help="cap on every table's rows (0: Criteo's full cardinalities)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dim", type=int, default=16, help="embedding dimension")
    p.add_argument("--bottom", type=ints, default=[512, 256, 64],
                   help="bottom MLP hidden sizes (the last layer, --dim, is added)")
    p.add_argument("--top", type=ints, default=[512, 256], help="top MLP hidden sizes (->1 added)")
    p.add_argument("--emb_lr", type=float, default=0.05, help="row-wise Adagrad lr (tables)")
    p.add_argument("--emb_eps", type=float, default=1e-8)
    p.add_argument("--dense_lr", type=float, default=0.01, help="Adagrad lr (MLPs)")
    p.add_argument("--zipf", type=float, default=1.2, help="power law exponent of the ids")
    p.add_argument("--data", choices=["auto", "criteo_synth", "builtin"], default="auto")
    p.add_argument("--sharding", default="auto",
                   choices=["auto", "table_wise", "column_wise", "table_column_wise", "data_parallel"],
                   help="auto: TorchRec's planner decides per table; else forced for all. TorchRec "
                        "1.9 offers row_wise/table_row_wise/grid_shard on cuda/tpu only, not cpu")
    p.add_argument("--eval_samples", type=int, default=8192, help="held-out samples (all ranks)")
    p.add_argument("--eval_step", type=int, default=1_000_000, help="step index of held-out set")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--netns", choices=["auto", "on", "off"], default="auto",
                   help="run the workers in a private network namespace (for the lo count)")
    p.add_argument("--port", type=int, default=0, help="rendezvous port (0: pick a free one)")
    p.add_argument("--json", help="write the results as JSON here")
    return p.parse_args(argv)


# ---------------------------------------------------------------- data

class _BuiltinSynth:
    """Used only when examples/python/criteo_synth.py is absent (--data builtin): the same
    recipe, numpy's Generator keyed by (seed, step, first row)."""

    def __init__(self, seed, max_rows, zipf):
        self.seed, self.zipf = seed, zipf
        self.cardinalities = tuple(c if not max_rows else min(c, max_rows)
                                   for c in CRITEO_CARDINALITIES)
        h = np.random.default_rng([seed, 1])
        self.dense_w = h.normal(0.0, 0.35, NUM_DENSE)
        self.feature_scale = h.uniform(0.1, 1.0, NUM_SPARSE) ** 2
        self.bias = float(np.log(0.26 / 0.74)) - 0.5
        self.hidden = [np.random.default_rng([seed, 2, f]).normal(0.0, 1.0, c) * self.feature_scale[f]
                       for f, c in enumerate(self.cardinalities)]

    def batch_rows(self, step, rows):
        rng = np.random.default_rng([self.seed, 3, step, int(rows[0])])
        n = len(rows)
        counts = np.exp(1.0 + 1.2 * rng.normal(size=(n, NUM_DENSE)))
        counts[rng.random((n, NUM_DENSE)) < 0.2] = 0.0
        dense = np.log1p(np.floor(counts)).astype(np.float32)
        u = 1.0 - rng.random((n, NUM_SPARSE))
        ranks = np.floor(u ** (-1.0 / (self.zipf - 1.0))) - 1.0
        ranks = np.minimum(ranks, np.asarray(self.cardinalities, np.float64)[None, :] - 1).astype(np.int64)
        logit = self.bias + (dense.astype(np.float64) - 1.0) @ self.dense_w
        for f in range(NUM_SPARSE):
            logit = logit + self.hidden[f][ranks[:, f]]
        labels = (rng.random(n) < 1.0 / (1.0 + np.exp(-logit))).astype(np.float32)
        return dense, ranks, labels


class Data:
    """Batches as (dense float32 (n,13), rows int64 (n,26), labels float32 (n,)), rows being
    each id's row in its feature's table."""

    def __init__(self, kind, seed, max_rows, zipf):
        self.kind = kind
        gen = None
        if kind in ("auto", "criteo_synth"):
            sys.path.insert(0, os.path.join(ROOT, "examples", "python"))
            try:
                from criteo_synth import CriteoSynth
                gen = CriteoSynth(seed=seed, max_rows=max_rows or None, zipf=zipf)
                self.kind = "criteo_synth"
            except ImportError:
                if kind == "criteo_synth":
                    raise
            finally:
                sys.path.pop(0)
        if gen is None:
            gen = _BuiltinSynth(seed, max_rows, zipf)
            self.kind = "builtin"
        self.gen = gen
        self.cardinalities = tuple(int(c) for c in gen.cardinalities)
        if self.kind == "criteo_synth":
            # hashed id -> popularity rank (= row), per feature: ids_of is a bijection
            self._sorted, self._rank = [], []
            for f, c in enumerate(self.cardinalities):
                ids = gen.ids_of(f, np.arange(c))
                order = np.argsort(ids, kind="stable")
                self._sorted.append(ids[order])
                self._rank.append(order.astype(np.int64))

    def batch(self, step, rows):
        if self.kind == "builtin":
            return self.gen.batch_rows(step, rows)
        dense, ids, labels = self.gen.batch(step, rows)
        out = np.empty_like(ids)
        for f in range(NUM_SPARSE):
            pos = np.searchsorted(self._sorted[f], ids[:, f])
            pos = np.minimum(pos, len(self._sorted[f]) - 1)
            if not np.array_equal(self._sorted[f][pos], ids[:, f]):
                raise RuntimeError(f"feature {FEATURES[f]}: an id outside the feature's rows")
            out[:, f] = self._rank[f][pos]
        return dense, out, labels


def auc_logloss(logits, labels):
    logits = np.asarray(logits, np.float64)
    labels = np.asarray(labels, np.float64)
    p = 1.0 / (1.0 + np.exp(-logits))
    eps = 1e-12
    logloss = float(-np.mean(labels * np.log(p + eps) + (1 - labels) * np.log(1 - p + eps)))
    # AUC = Mann-Whitney U / (n_pos n_neg), ties get their average rank
    order = np.argsort(logits, kind="mergesort")
    s = logits[order]
    ranks = np.empty(len(s))
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[order[i:j + 1]] = 0.5 * (i + j) + 1.0
        i = j + 1
    npos = labels.sum()
    nneg = len(labels) - npos
    auc = float((ranks[labels == 1].sum() - npos * (npos + 1) / 2) / (npos * nneg)) if npos and nneg else float("nan")
    return logloss, auc


# ---------------------------------------------------------------- measuring

def lo_counters():
    """(rx_bytes, tx_bytes, rx_packets, tx_packets) of lo in this network namespace."""
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name.strip() == "lo":
                v = rest.split()
                return int(v[0]), int(v[8]), int(v[1]), int(v[9])
    return 0, 0, 0, 0


class CommCounter:
    """Wraps torch.distributed's Python collectives: counts calls and the bytes this rank
    sends to other ranks (all_to_all_single: its input rows for other ranks; all-reduce,
    all-gather, reduce-scatter: the input tensor's bytes)."""

    NAMES = ("all_to_all_single", "all_reduce", "all_gather", "all_gather_into_tensor",
             "reduce_scatter", "reduce_scatter_tensor", "broadcast", "all_to_all")

    def __init__(self, dist, rank, world):
        self.dist, self.rank, self.world = dist, rank, world
        self.calls, self.bytes = {}, {}
        self.enabled = False
        for name in self.NAMES:
            orig = getattr(dist, name, None)
            if orig is not None:
                setattr(dist, name, self._wrap(name, orig))

    @staticmethod
    def _nbytes(t):
        try:
            return t.numel() * t.element_size()
        except AttributeError:
            return sum(x.numel() * x.element_size() for x in t)

    def _wrap(self, name, orig):
        def wrapped(*args, **kwargs):
            if self.enabled:
                self.calls[name] = self.calls.get(name, 0) + 1
                self.bytes[name] = self.bytes.get(name, 0) + self._sent(name, args, kwargs)
            return orig(*args, **kwargs)
        wrapped.__wrapped__ = orig
        return wrapped

    def _sent(self, name, args, kwargs):
        if name == "all_to_all_single":
            inp = kwargs.get("input", args[1] if len(args) > 1 else None)
            splits = kwargs.get("input_split_sizes", args[3] if len(args) > 3 else None)
            group = kwargs.get("group", args[4] if len(args) > 4 else None)
            me = self.dist.get_rank(group) if group is not None else self.rank
            total = self._nbytes(inp)
            if not splits or inp.dim() == 0 or inp.shape[0] == 0:
                n = self.dist.get_world_size(group) if group is not None else self.world
                return total * (n - 1) // n
            row = total // inp.shape[0]
            return sum(s * row for i, s in enumerate(splits) if i != me)
        if name == "all_to_all":
            inputs = kwargs.get("input_tensor_list", args[1] if len(args) > 1 else [])
            return sum(self._nbytes(t) for i, t in enumerate(inputs) if i != self.rank)
        if name in ("all_gather", "all_gather_into_tensor"):
            t = kwargs.get("tensor", kwargs.get("input_tensor", args[1] if len(args) > 1 else None))
        else:
            t = args[1] if name == "reduce_scatter_tensor" and len(args) > 1 else (args[0] if args else None)
            if name == "reduce_scatter":
                t = kwargs.get("input_list", args[1] if len(args) > 1 else [])
        return self._nbytes(t) if t is not None else 0


# ---------------------------------------------------------------- worker

def worker(rank, args, port, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      RANK=str(rank), WORLD_SIZE=str(args.world), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(args.world))
    warnings.filterwarnings("ignore")
    import logging
    logging.disable(logging.WARNING)
    import torch
    import torch.distributed as dist
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor
    from torchrec.models.dlrm import DLRM
    from torchrec.distributed import DistributedModelParallel
    from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
    from torchrec.distributed.planner.types import ParameterConstraints
    from torchrec.distributed.sharding_plan import get_default_sharders
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
    from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper
    from torchrec.optim.optimizers import in_backward_optimizer_filter
    from torchrec.optim.rowwise_adagrad import RowWiseAdagrad
    rss_import = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    W = args.world
    counter = CommCounter(dist, rank, W)
    cpu = torch.device("cpu")

    data = Data(args.data, args.seed, args.max_rows, args.zipf)
    B = args.batch
    total_steps = args.warmup + args.steps

    def to_inputs(dense, rows, labels):
        n = rows.shape[0]
        kjt = KeyedJaggedTensor.from_lengths_sync(
            keys=list(FEATURES),
            values=torch.from_numpy(np.ascontiguousarray(rows.T).reshape(-1)),
            lengths=torch.ones(NUM_SPARSE * n, dtype=torch.int32))
        return torch.from_numpy(dense), kjt, torch.from_numpy(labels)

    batches = [to_inputs(*data.batch(s, np.arange(rank * B, (rank + 1) * B))) for s in range(total_steps)]
    n_eval = args.eval_samples // W
    eval_batch = to_inputs(*data.batch(args.eval_step, np.arange(rank * n_eval, (rank + 1) * n_eval)))

    tables = [EmbeddingBagConfig(name=f"t_{f}", embedding_dim=args.dim, num_embeddings=c,
                                 feature_names=[f]) for f, c in zip(FEATURES, data.cardinalities)]
    ebc = EmbeddingBagCollection(tables=tables, device=torch.device("meta"))
    model = DLRM(embedding_bag_collection=ebc, dense_in_features=NUM_DENSE,
                 dense_arch_layer_sizes=args.bottom + [args.dim],
                 over_arch_layer_sizes=args.top + [1], dense_device=cpu)
    apply_optimizer_in_backward(RowWiseAdagrad, model.sparse_arch.parameters(),
                                {"lr": args.emb_lr, "eps": args.emb_eps})
    constraints = None
    if args.sharding != "auto":
        constraints = {t.name: ParameterConstraints(sharding_types=[args.sharding]) for t in tables}
    planner = EmbeddingShardingPlanner(
        topology=Topology(world_size=W, local_world_size=W, compute_device="cpu"),
        constraints=constraints)
    plan = planner.collective_plan(model, get_default_sharders(), dist.GroupMember.WORLD)
    dmp = DistributedModelParallel(module=model, device=cpu, plan=plan)
    dense_params = dict(in_backward_optimizer_filter(dmp.named_parameters()))
    dense_opt = KeyedOptimizerWrapper(dense_params, lambda ps: torch.optim.Adagrad(ps, lr=args.dense_lr))
    opt = CombinedOptimizer([dmp.fused_optimizer, dense_opt])
    loss_fn = torch.nn.BCEWithLogitsLoss()
    dense_bytes = sum(p.numel() * p.element_size() for p in dense_params.values())

    plan_summary = {}
    for mod_plan in plan.plan.values():
        for tname, ps in mod_plan.items():
            plan_summary[tname] = {"sharding": ps.sharding_type, "kernel": ps.compute_kernel,
                                   "ranks": list(ps.ranks) if ps.ranks else None}

    def evaluate():
        dmp.eval()
        with torch.no_grad():
            logits = dmp(eval_batch[0], eval_batch[1]).squeeze(-1)
        dmp.train()
        both = torch.stack([logits.float(), eval_batch[2]])
        out = [torch.empty_like(both) for _ in range(W)]
        dist.all_gather(out, both)
        allv = torch.cat(out, dim=1).numpy()
        return auc_logloss(allv[0], allv[1])

    before = evaluate()
    losses = []
    dist.barrier()
    t0 = lo0 = None
    for step in range(total_steps):
        if step == args.warmup:
            dist.barrier()
            lo0 = lo_counters()
            counter.enabled = True
            t0 = time.perf_counter()
        dense, kjt, labels = batches[step]
        opt.zero_grad()
        logits = dmp(dense, kjt).squeeze(-1)
        loss = loss_fn(logits, labels)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    counter.enabled = False
    dist.barrier()
    elapsed = time.perf_counter() - t0
    lo1 = lo_counters()
    after = evaluate()

    mine = {"rank": rank, "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "maxrss_after_import_kib": rss_import,
            "comm_calls": counter.calls, "comm_bytes": counter.bytes, "elapsed_s": elapsed,
            "losses": losses}
    gathered = [None] * W
    dist.all_gather_object(gathered, mine)
    if rank == 0:
        queue.put({"before": before, "after": after, "elapsed": elapsed, "lo0": lo0, "lo1": lo1,
                   "ranks": gathered, "plan": plan_summary, "dense_param_bytes": dense_bytes,
                   "data_kind": data.kind, "cardinalities": data.cardinalities,
                   "versions": versions()})
    dist.barrier()
    dist.destroy_process_group()


def versions():
    from importlib.metadata import version
    import torch
    out = {"python": platform.python_version(), "torch": torch.__version__}
    for name in ("torchrec", "fbgemm-gpu-cpu", "numpy"):
        try:
            out[name] = version(name)
        except Exception:
            out[name] = None
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def maybe_reexec_in_netns(args):
    """Re-runs this script inside `unshare --net` with lo up, so lo counts only ours."""
    if os.environ.get(NETNS_ENV) or args.netns == "off":
        return
    ok = os.geteuid() == 0 and shutil.which("unshare") and shutil.which("ip")
    if not ok:
        if args.netns == "on":
            sys.exit("torchrec_dlrm.py: --netns on needs root, unshare and ip")
        print("note: no private network namespace (not root or no unshare/ip): lo bytes "
              "count the whole machine's loopback traffic", flush=True)
        return
    env = dict(os.environ, **{NETNS_ENV: "1"})
    cmd = ["unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$@"', "sh",
           sys.executable, os.path.abspath(__file__)] + sys.argv[1:]
    rc = subprocess.call(cmd, env=env)
    if rc != 0 and args.netns == "auto":
        # unshare refused (no CAP_SYS_ADMIN in a container, say): run without it
        probe = subprocess.call(["unshare", "--net", "--", "true"], stderr=subprocess.DEVNULL)
        if probe != 0:
            print("note: unshare --net failed; running without a private namespace", flush=True)
            os.environ[NETNS_ENV] = "0"
            return
    sys.exit(rc)


def main():
    args = parse_args()
    maybe_reexec_in_netns(args)
    in_netns = os.environ.get(NETNS_ENV) == "1"
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # no c10d hostname warnings in the netns
    import torch.multiprocessing as mp

    port = args.port or free_port()
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    t_start = time.perf_counter()
    mp.start_processes(worker, args=(args, port, queue), nprocs=args.world, join=True,
                       start_method="spawn")
    wall = time.perf_counter() - t_start
    r = queue.get()

    W, B, steps = args.world, args.batch, args.steps
    tx = r["lo1"][1] - r["lo0"][1]
    pkts = r["lo1"][3] - r["lo0"][3]
    ranks = sorted(r["ranks"], key=lambda x: x["rank"])
    payload_py = sum(sum(x["comm_bytes"].values()) for x in ranks)
    payload_ddp = steps * W * r["dense_param_bytes"] if W > 1 else 0  # every step, every rank
    per_op = {}
    for x in ranks:
        for k, v in x["comm_bytes"].items():
            per_op.setdefault(k, [0, 0])
            per_op[k][0] += v
            per_op[k][1] += x["comm_calls"].get(k, 0)
    losses = np.array([x["losses"] for x in ranks]).mean(0)
    sharding_counts = {}
    for t in r["plan"].values():
        sharding_counts[t["sharding"]] = sharding_counts.get(t["sharding"], 0) + 1
    res = {
        "system": "torchrec",
        "world": W, "batch_per_worker": B, "global_batch": W * B, "steps": steps,
        "warmup": args.warmup, "seed": args.seed, "max_rows": args.max_rows,
        "dim": args.dim, "bottom_mlp": [NUM_DENSE] + args.bottom + [args.dim],
        "top_mlp": args.top + [1], "emb_lr": args.emb_lr, "dense_lr": args.dense_lr,
        "threads_per_process": args.threads, "data": r["data_kind"],
        "table_rows": sum(r["cardinalities"]),
        "elapsed_s": r["elapsed"], "samples_per_s": W * B * steps / r["elapsed"],
        "steps_per_s": steps / r["elapsed"], "wall_s_total": wall,
        "peak_rss_mib": [x["maxrss_kib"] / 1024 for x in ranks],
        "rss_after_imports_mib": [x["maxrss_after_import_kib"] / 1024 for x in ranks],
        "wire_bytes_per_step": tx / steps, "wire_packets_per_step": pkts / steps,
        "wire_counter": "lo tx_bytes, private netns" if in_netns else "lo tx_bytes, whole machine",
        "payload_bytes_per_step": (payload_py + payload_ddp) / steps,
        "payload_bytes_per_step_torchrec_collectives": payload_py / steps,
        "payload_bytes_per_step_ddp_allreduce_input": payload_ddp / steps,
        "payload_by_op_per_step": {k: {"bytes": v[0] / steps, "calls": v[1] / steps}
                                   for k, v in per_op.items()},
        "dense_param_bytes": r["dense_param_bytes"],
        "eval_samples": (args.eval_samples // W) * W, "eval_step": args.eval_step,
        "eval_before": {"logloss": r["before"][0], "auc": r["before"][1]},
        "eval_after": {"logloss": r["after"][0], "auc": r["after"][1]},
        "train_loss_first5": float(losses[:5].mean()), "train_loss_last5": float(losses[-5:].mean()),
        "sharding": sharding_counts, "plan": r["plan"], "versions": r["versions"],
    }
    print(f"TorchRec DLRM (DistributedModelParallel, CPU, gloo): W={W} batch/worker={B} "
          f"steps={steps} (+{args.warmup} warm-up) seed={args.seed} max_rows={args.max_rows} "
          f"data={res['data']} table rows={res['table_rows']}")
    print(f"  versions: {r['versions']}")
    print(f"  sharding plan: {sharding_counts}  "
          + " ".join(f"{k}:{v['sharding']}{v['ranks']}" for k, v in r["plan"].items()))
    print(f"  samples/s: {res['samples_per_s']:.1f}  ({res['steps_per_s']:.2f} steps/s, "
          f"{r['elapsed']:.2f} s for {steps} steps; wall incl. start-up {wall:.1f} s)")
    print(f"  peak RSS per process (MiB): {[round(v, 1) for v in res['peak_rss_mib']]} "
          f"(of which after importing torch+torchrec: {[round(v, 1) for v in res['rss_after_imports_mib']]})")
    print(f"  wire bytes/step ({res['wire_counter']}): {res['wire_bytes_per_step']:.0f} "
          f"({res['wire_packets_per_step']:.1f} packets/step)")
    print(f"  payload bytes/step: {res['payload_bytes_per_step']:.0f} = torchrec collectives "
          f"{res['payload_bytes_per_step_torchrec_collectives']:.0f} + DDP all-reduce input "
          f"{res['payload_bytes_per_step_ddp_allreduce_input']:.0f} (W x {r['dense_param_bytes']} B dense grads)")
    for k, v in res["payload_by_op_per_step"].items():
        print(f"    {k}: {v['calls']:.1f} calls/step, {v['bytes']:.0f} B/step (all ranks)")
    print(f"  held-out ({res['eval_samples']} samples, step {args.eval_step}): "
          f"before logloss {r['before'][0]:.4f} AUC {r['before'][1]:.4f}; "
          f"after logloss {r['after'][0]:.4f} AUC {r['after'][1]:.4f}")
    print(f"  train loss: first 5 steps {res['train_loss_first5']:.4f}, last 5 {res['train_loss_last5']:.4f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
        print(f"  wrote {args.json}")


if __name__ == "__main__":
    main()
