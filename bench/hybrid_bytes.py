"""Counted bytes per machine per step of examples/python/hybrid_lm.py under --mode=hybrid,
ps, allreduce and allgather, next to the formulas of Parallax (PAPERS.md §5).

    python bench/hybrid_bytes.py [--machines 2 4 8] [--steps 12] [--json FILE]
    python bench/hybrid_bytes.py --machines 4 --workers_per_machine 2 --aggregate both

With --workers_per_machine G, a machine is G workers and G servers (ranks kG..kG+G-1),
and --aggregate says whether the workers of a machine aggregate locally (the example's
--hosts G: a host's sparse rows coalesced and pushed once, its dense gradients summed
before the all-reduce among the hosts' leaders) or not (--hosts rank); 'all' adds a run
with --host_pulls (the leader also pulls the union of its workers' rows once). The
formulas are printed for G = 1 only.

A machine is one worker and one server (m workers, m servers, one layerps.launch per
mode; every worker its own host, --hosts rank, so nothing is aggregated locally). Bytes
of machine k = what worker k exchanged with every peer but its own server and the
scheduler (its traffic() counters) + what every other worker exchanged with server k
(their counters): sent plus received, headers included. Dense w = 4 x (MLP parameters);
each embedding's w = 4 x vocab x dim; alpha = the rows a worker touches per step / vocab,
measured (each worker trains on --batch examples a step, so alpha stays put as m grows, as
on Parallax's machines). Formulas (payload only): dense through PS or all-reduce 4w(m-1)/m; sparse
through PS 4 alpha w (m-1)/m; sparse all-gathered 2 alpha w (m-1); a key adds 8 bytes to
a row of 4 x dim, shown as the factor (1 + 2/dim) on the sparse terms.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "examples", "python", "hybrid_lm.py")
MODES = ("hybrid", "ps", "allreduce", "allgather")


def run(mode, m, args, work, aggregate=0):
    """aggregate: 0 none, 1 local aggregation, 2 local aggregation and host pulls."""
    g = args.workers_per_machine
    n = m * g  # workers, and servers
    out = os.path.join(work, f"{mode}-{m}-{int(aggregate)}-{{rank}}.json")
    hosts = str(g) if aggregate else "rank"
    cmd = [sys.executable, "-m", "layerps.launch", "-s", str(n), "-w", str(n), "--quiet_daemons",
           "--timeout_s=1200", "--", sys.executable, EXAMPLE, "--mode", mode, "--hosts", hosts,
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--vocab", str(args.vocab),
           "--dim", str(args.dim), "--hidden", str(args.hidden), "--batch", str(args.batch * n),
           "--json", out] + (["--host_pulls"] if aggregate == 2 else [])
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        raise SystemExit(f"{mode} m={m} failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return [json.load(open(out.format(rank=r))) for r in range(n)]


def per_machine(results, g=1):
    """Mean over machines (G workers and G servers each) of the bytes per step that cross
    a machine's boundary."""
    n = len(results)
    m = n // g
    nodes = {int(k): v for k, v in results[0]["nodes"].items()}
    server_of = {rank: nid for nid, (role, rank) in nodes.items() if role == "server"}
    worker_of = {rank: nid for nid, (role, rank) in nodes.items() if role == "worker"}
    totals = []
    for k in range(m):
        ranks = range(k * g, (k + 1) * g)
        own = {server_of[r] for r in ranks} | {worker_of[r] for r in ranks}
        b = 0.0
        for r in ranks:
            mine = results[r]["bytes_per_step_by_peer"]
            b += sum(v for peer, v in mine.items() if int(peer) in nodes and int(peer) not in own
                     and nodes[int(peer)][0] != "scheduler")
        for j in range(n):
            if j not in ranks:
                b += sum(results[j]["bytes_per_step_by_peer"].get(str(server_of[r]), 0.0) for r in ranks)
        totals.append(b)
    return sum(totals) / m


def formulas(r, m, dim):
    wd = 4.0 * r["dense_params"]
    ws = {k: 4.0 * v for k, v in r["sparse_params"].items()}
    alpha = r["alpha"]
    f = (m - 1) / m
    key = 1 + 2 / dim
    dense = 4 * wd * f
    sparse_ps = sum(4 * alpha[k] * ws[k] * f for k in ws) * key
    sparse_ag = sum(2 * alpha[k] * ws[k] * (m - 1) for k in ws) * key
    sparse_ar = sum(4 * ws[k] * f for k in ws)
    return {"hybrid": dense + sparse_ps, "ps": dense + sparse_ps, "allreduce": dense + sparse_ar,
            "allgather": dense + sparse_ag}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--machines", type=int, nargs="+", default=[2, 4, 8])
    p.add_argument("--modes", nargs="+", default=list(MODES))
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--vocab", type=int, default=20000)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--batch", type=int, default=128, help="per worker (the global batch grows with m)")
    p.add_argument("--workers_per_machine", type=int, default=1)
    p.add_argument("--aggregate", choices=["no", "yes", "both", "all"], default="no",
                   help="local aggregation among a machine's workers (with --workers_per_machine > 1)")
    p.add_argument("--json")
    args = p.parse_args()
    if args.workers_per_machine > 1:
        return local_aggregation(args)
    work = tempfile.mkdtemp(prefix="layerps-hybrid-bytes-")
    rows = []
    for m in args.machines:
        for mode in args.modes:
            res = run(mode, m, args, work)
            counted = per_machine(res)
            r0 = res[0]
            alpha = {k: sum(r["alpha"][k] for r in res) / m for k in r0["alpha"]}
            r0 = dict(r0, alpha=alpha)
            predicted = formulas(r0, m, args.dim)[mode]
            row = dict(m=m, mode=mode, counted=counted, predicted=predicted, alpha=alpha,
                       seconds_per_step=max(r["seconds_per_step_with_barrier"] for r in res),
                       eval_loss=r0["eval_loss"], dense_bytes=4 * r0["dense_params"],
                       sparse_bytes={k: 4 * v for k, v in r0["sparse_params"].items()})
            rows.append(row)
            print(f"m={m} {mode:9} counted {counted / 1e6:9.4f} MB/machine/step  formula {predicted / 1e6:9.4f} MB "
                  f"({(counted - predicted) / predicted * 100:+6.1f}%)  alpha in {alpha['inp.weight']:.4f} "
                  f"out {alpha['out.weight']:.4f}  {row['seconds_per_step'] * 1e3:7.1f} ms/step  "
                  f"eval loss {row['eval_loss']:.4f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(args=vars(args), rows=rows), f, indent=1)


def local_aggregation(args):
    """Bytes per machine per step with and without local aggregation (G workers a machine)."""
    g = args.workers_per_machine
    work = tempfile.mkdtemp(prefix="layerps-hybrid-local-")
    choices = {"no": [0], "yes": [1], "both": [0, 1], "all": [0, 1, 2]}[args.aggregate]
    label = {0: "off        ", 1: "on         ", 2: "on + pulls "}
    rows = []
    for m in args.machines:
        for mode in args.modes:
            counted = {}
            for aggregate in choices:
                res = run(mode, m, args, work, aggregate)
                counted[aggregate] = per_machine(res, g)
                rows.append(dict(m=m, workers_per_machine=g, mode=mode, aggregate=aggregate,
                                 counted=counted[aggregate],
                                 seconds_per_step=max(r["seconds_per_step_with_barrier"] for r in res),
                                 eval_loss=res[0]["eval_loss"]))
                print(f"m={m} x {g} workers {mode:9} local aggregation {label[aggregate]}"
                      f"counted {counted[aggregate] / 1e6:9.4f} MB/machine/step  "
                      f"{rows[-1]['seconds_per_step'] * 1e3:7.1f} ms/step  eval loss {rows[-1]['eval_loss']:.4f}",
                      flush=True)
            if 0 in counted and len(counted) > 1:
                print(f"m={m} x {g} workers {mode:9} off / on = {counted[0] / counted[1]:.2f}"
                      + (f", off / on + pulls = {counted[0] / counted[2]:.2f}" if 2 in counted else ""), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(args=vars(args), rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
