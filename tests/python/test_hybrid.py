"""The sparsity-aware hybrid: DistributedOptimizer(mode='hybrid' | 'ps' | 'allreduce'),
local aggregation by host, partitioned sparse tables and the partition search."""

import math

import numpy as np
import pytest
import torch
import torch.nn as nn

import layerps
import layerps.torch as lt
from layerps import partition
from conftest import FAST, run_parallel

ROWS, DIM, BATCH = 40, 4, 16


class Net(nn.Module):
    """An embedding, an embedding bag (both sparse) and a dense head."""

    def __init__(self, seed, rows=ROWS, dim=DIM):
        super().__init__()
        self.emb = nn.Embedding(rows, dim, sparse=True)
        self.bag = nn.EmbeddingBag(rows, dim, sparse=True, mode="mean")
        self.fc = nn.Linear(2 * dim, 1)
        g = torch.Generator().manual_seed(seed)  # per rank on purpose: the optimizer broadcasts rank 0's
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)

    def forward(self, ids):
        return self.fc(torch.cat([self.emb(ids[:, 0]), self.bag(ids[:, 1:])], 1)).squeeze(1)


def batch(step, rows=ROWS):
    """The global batch of a step: skewed ids (low ids are frequent) and targets."""
    g = torch.Generator().manual_seed(1000 + step)
    u = torch.rand(BATCH, 3, generator=g)
    ids = (u ** 3 * rows).long().clamp_(max=rows - 1)
    return ids, torch.randn(BATCH, generator=g)


def loss_of(model, ids, y):
    return ((model(ids) - y) ** 2).mean()


def reference(steps, make_opt, rows=ROWS):
    """One process, the global batch, rank 0's starting values."""
    model = Net(0, rows)
    opt = make_opt(model)
    for t in range(steps):
        opt.zero_grad()
        loss_of(model, *batch(t, rows)).backward()
        opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def train(w, steps, make_opt, rows=ROWS, after_step=None, **kwargs):
    """Worker w's share of each global batch (BATCH / W rows); returns the final values
    (finish() pulls the server-held rows in) and the optimizer."""
    W = w.num_workers
    model = Net(w.rank, rows)
    opt = lt.DistributedOptimizer(make_opt(model), model.named_parameters(), worker=w, **kwargs)
    share = BATCH // W
    for t in range(steps):
        ids, y = batch(t, rows)
        opt.zero_grad()
        loss_of(model, ids[w.rank * share:(w.rank + 1) * share], y[w.rank * share:(w.rank + 1) * share]).backward()
        opt.step()
        if after_step is not None:
            after_step(t, opt, model)
    opt.finish()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, opt


def sgd(model):
    return torch.optim.SGD(model.parameters(), lr=0.1)


def assert_equal_to(results, ref, atol=1e-5):
    for values in results:
        for k in ref:
            torch.testing.assert_close(values[k], ref[k], rtol=0, atol=atol, msg=lambda m: f"{k}: {m}")


@pytest.mark.parametrize("variant", [
    dict(),                                     # hybrid by default; one host: coalesced on its leader
    dict(mode="hybrid", local_aggregation=False),  # flat: every worker pushes
    dict(mode="hybrid", hosts=["a", "b"]),       # two hosts of one worker
    dict(mode="hybrid", partitions=3),           # rows spread over three tables
    dict(mode="ps"),                            # everything through the servers
    dict(mode="allreduce"),                     # embeddings densified and all-reduced
    dict(routes={"emb.weight": "allgather", "bag.weight": "allgather"}),  # rows sent to every worker
])
def test_two_workers_equal_one_process_with_the_global_batch(variant):
    steps = 8
    ref = reference(steps, sgd)
    with layerps.LocalCluster(num_servers=2, num_workers=2, **FAST) as c:
        out = run_parallel(lambda w: train(w, steps, sgd, name="eq", **variant), [(w,) for w in c.workers])
    assert_equal_to([v for v, _ in out], ref)
    opt = out[0][1]
    mode = variant.get("mode", "hybrid")
    sparse_route = variant.get("routes", {}).get("emb.weight", {"hybrid": "ps", "ps": "ps", "allreduce": "allreduce"}[mode])
    dense_route = {"hybrid": "allreduce", "ps": "ps", "allreduce": "allreduce"}[mode]
    assert opt.kinds == {"emb.weight": "sparse", "bag.weight": "sparse", "fc.weight": "dense", "fc.bias": "dense"}
    assert opt.routes == {"emb.weight": sparse_route, "bag.weight": sparse_route,
                          "fc.weight": dense_route, "fc.bias": dense_route}
    if sparse_route == "ps":
        want = variant.get("partitions", 2)  # default: one partition per server
        assert opt.partitions == {"emb.weight": want, "bag.weight": want}
        # The rows of an embedding were pulled only as looked up (never the whole table).
        sp = {s.name: s for s in opt.hybrid.sparse_params}
        assert 0 < sp["emb.weight"].rows_pulled - ROWS < steps * BATCH


def test_state_dict_is_current_on_every_worker_without_a_special_call():
    """Issue 31 item 7: while the servers hold the embedding rows, model.state_dict()
    pulls them in first, so every worker's state_dict equals one process's after the
    same steps, with no pull_sparse_params() (before the fix: equal=False across workers)."""
    steps = 5
    ref = reference(steps, sgd)

    def role(w):
        W = w.num_workers
        model = Net(w.rank, ROWS)
        opt = lt.DistributedOptimizer(sgd(model), model.named_parameters(), worker=w, name="fresh")
        share = BATCH // W
        for t in range(steps):
            ids, y = batch(t, ROWS)
            opt.zero_grad()
            loss_of(model, ids[w.rank * share:(w.rank + 1) * share], y[w.rank * share:(w.rank + 1) * share]).backward()
            opt.step()
        w.barrier("workers")  # every worker's last pushes applied
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        opt.finish()
        return state

    with layerps.LocalCluster(num_servers=2, num_workers=2, **FAST) as c:
        out = run_parallel(role, [(w,) for w in c.workers])
    assert_equal_to(out, ref)


def test_routes_override_and_stateful_rules_stay_exact():
    """routes= moves single parameters; Adagrad is not linear in the gradient, so each row
    must be updated once per step with the summed gradient (the pushers exchange rows):
    equal to one process's torch.optim.Adagrad, whose sparse update is the same lazy rule."""
    steps = 6

    def adagrad(model):
        return torch.optim.Adagrad(model.parameters(), lr=0.2, eps=1e-10)

    ref = reference(steps, adagrad)
    routes = {"bag.weight": "allreduce", "fc.bias": "ps"}
    with layerps.LocalCluster(num_servers=2, num_workers=2, **FAST) as c:
        out = run_parallel(lambda w: train(w, steps, adagrad, name="ada", routes=routes, local_aggregation=False),
                           [(w,) for w in c.workers])
    assert out[0][1].routes == {"emb.weight": "ps", "bag.weight": "allreduce", "fc.weight": "allreduce",
                                "fc.bias": "ps"}
    assert_equal_to([v for v, _ in out], ref)


def test_local_aggregation_equals_flat_and_pushes_fewer_bytes():
    """Four workers faked onto two hosts: the same values as the flat version, and fewer
    payload bytes pushed to the servers (one coalesced push per host and step)."""
    steps = 6

    def run(**kwargs):
        with layerps.LocalCluster(num_servers=2, num_workers=4, **FAST) as c:
            def work(w):
                before = {}

                def count(t, opt, model):
                    if t == 0:  # from the end of the first step (which routes and sets up)
                        before.update(w.traffic()["tables"])
                        before["pulled"] = sum(sp.rows_pulled for sp in opt.hybrid.sparse_params)
                    if t == steps - 1:
                        ids = {t.id for sp in opt.hybrid.sparse_params for t in sp.tables}
                        after = w.traffic()["tables"]
                        sent = sum(after[i]["bytes_sent"] - before.get(i, {"bytes_sent": 0})["bytes_sent"] for i in ids)
                        pulled = sum(sp.rows_pulled for sp in opt.hybrid.sparse_params) - before["pulled"]
                        before["pushed"] = sent - 8 * pulled  # a pull request sends its 8-byte keys

                values, opt = train(w, steps, sgd, name="agg", after_step=count, **kwargs)
                return values, before["pushed"]

            return run_parallel(work, [(w,) for w in c.workers])

    flat = run(local_aggregation=False)
    hier = run(hosts=lambda rank: rank // 2)
    ref = reference(steps, sgd)
    assert_equal_to([v for v, _ in flat], ref)
    assert_equal_to([v for v, _ in hier], ref)
    flat_bytes = sum(b for _, b in flat)
    hier_bytes = sum(b for _, b in hier)
    print(f"sparse push payload over {steps - 1} steps, 4 workers: flat {flat_bytes} B, two hosts {hier_bytes} B")
    assert [b for _, b in hier][1::2] == [0, 0]  # the non-leaders push nothing

    def unique_rows(groups):  # rows pushed per step: the unique ids of each group's examples
        n = 0
        for t in range(1, steps):
            ids, _ = batch(t)
            for g in groups:
                mine = ids[g[0] * 4:(g[-1] + 1) * 4]
                n += mine[:, 0].unique().numel() + mine[:, 1:].unique().numel()
        return n

    row = 8 + 4 * DIM  # a key and its row
    assert flat_bytes == row * unique_rows([[0], [1], [2], [3]])
    assert hier_bytes == row * unique_rows([[0, 1], [2, 3]])
    assert hier_bytes < 0.9 * flat_bytes


def test_host_pulls_equal_one_process_and_pull_each_hosts_union_once():
    """host_pulls=True with four workers on two hosts: the same values as one process; each
    host's leader pulls the union of its workers' rows once per lookup and the others pull
    nothing from the servers; a forward without grad (evaluation) pulls on its own, so one
    worker may run it alone."""
    steps = 6
    counted = {}

    def work(w):
        def count(t, opt, model):
            if t == 0:
                counted[w.rank] = -sum(sp.rows_pulled for sp in opt.hybrid.sparse_params)
            if t == steps - 1:
                if w.rank in (0, 1):  # alone (a leader, a non-leader): no host exchange
                    model.eval()
                    with torch.no_grad():
                        model(batch(0)[0][:4])
                    model.train()
                counted[w.rank] += sum(sp.rows_pulled for sp in opt.hybrid.sparse_params)

        values, _ = train(w, steps, sgd, name="hostpull", after_step=count, hosts=lambda r: r // 2,
                          host_pulls=True)
        return values

    with layerps.LocalCluster(num_servers=2, num_workers=4, **FAST) as c:
        out = run_parallel(work, [(w,) for w in c.workers])
    assert_equal_to(out, reference(steps, sgd))

    def union_rows(ranks):  # rows a host looks up in steps 1..steps-1 (emb and bag)
        n = 0
        for t in range(1, steps):
            ids, _ = batch(t)
            mine = ids[ranks[0] * 4:(ranks[-1] + 1) * 4]
            n += mine[:, 0].unique().numel() + mine[:, 1:].unique().numel()
        return n

    # The two evaluation forwards pulled their own 4 examples' rows.
    ids0 = batch(0)[0][:4]
    own = ids0[:, 0].unique().numel() + ids0[:, 1:].unique().numel()
    assert counted == {0: union_rows([0, 1]) + own, 1: own, 2: union_rows([2, 3]), 3: 0}


def test_hierarchical_dense_through_the_servers_and_momentum():
    """mode='ps' with two hosts of two workers: dense gradients summed on the host, one
    push and one pull per host; SGD with momentum (server-side 'momentum' for the rows,
    torch's for the dense part) stays equal between the flat and the hierarchical run."""
    steps = 5

    def momentum(model):
        return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def run(**kwargs):
        with layerps.LocalCluster(num_servers=2, num_workers=4, **FAST) as c:
            return run_parallel(lambda w: train(w, steps, momentum, name="mom", mode="ps", **kwargs)[0],
                                [(w,) for w in c.workers])

    flat = run(local_aggregation=False)
    hier = run(hosts=[0, 0, 1, 1])
    for a, b in zip(flat, hier):
        for k in a:
            torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-5)
    for r in hier[1:]:
        for k in r:
            assert torch.equal(r[k], hier[0][k])


def test_bad_routes_and_gradients_raise(worker):
    model = Net(0)
    with pytest.raises(layerps.InvalidArgumentError, match="no parameter named 'nope'"):
        lt.DistributedOptimizer(sgd(model), model.named_parameters(), worker=worker, routes={"nope": "ps"})
    with pytest.raises(layerps.InvalidArgumentError, match="expected 'ps', 'allreduce' or 'allgather'"):
        lt.DistributedOptimizer(sgd(model), model.named_parameters(), worker=worker, routes={"fc.bias": "gpu"})
    with pytest.raises(layerps.InvalidArgumentError, match="must be >= 1"):
        lt.DistributedOptimizer(sgd(model), model.named_parameters(), worker=worker, partitions=0)
    with pytest.raises(layerps.InvalidArgumentError, match="belong to modes"):
        lt.DistributedOptimizer(sgd(model), model.named_parameters(), worker=worker, mode="aggregate",
                                routes={"fc.bias": "ps"})
    with pytest.raises(layerps.InvalidArgumentError, match="one label per worker"):
        lt.DistributedOptimizer(sgd(model), model.named_parameters(), worker=worker, hosts=["a", "b"])

    ids, y = batch(0)

    def first_step(opt, m):
        opt.zero_grad()
        loss_of(m, ids, y).backward()
        opt.step()

    # More partitions than rows: refused at the first step, which declares the tables.
    m = Net(0)
    opt = lt.DistributedOptimizer(sgd(m), m.named_parameters(), worker=worker, name="many", partitions=ROWS + 1)
    with pytest.raises(layerps.InvalidArgumentError, match=f"{ROWS + 1} partitions for {ROWS} rows"):
        first_step(opt, m)

    m = Net(0)
    opt = lt.DistributedOptimizer(sgd(m), m.named_parameters(), worker=worker, name="bad")
    first_step(opt, m)
    assert opt.routes["emb.weight"] == "ps" and opt.routes["fc.weight"] == "allreduce"
    # A table marked sparse receiving a dense gradient...
    m.emb.weight.grad = torch.zeros_like(m.emb.weight)
    with pytest.raises(layerps.InvalidArgumentError, match="'emb.weight' was routed as sparse .* dense gradient"):
        opt.step()
    # ... and a dense parameter receiving a sparse one.
    m.emb.weight.grad = None
    m.fc.weight.grad = torch.zeros_like(m.fc.weight).to_sparse()
    with pytest.raises(layerps.InvalidArgumentError, match="'fc.weight' was routed as dense .* sparse gradient"):
        opt.step()
    m.fc.weight.grad = None
    # Rows used without the module's forward (so never pulled) cannot be pushed.
    opt.zero_grad()
    torch.nn.functional.embedding(ids[:, 0], m.emb.weight, sparse=True).sum().backward()
    with pytest.raises(layerps.InvalidArgumentError, match="not looked up through an nn.Embedding"):
        opt.step()
    opt.finish()
    with pytest.raises(layerps.InvalidArgumentError, match="must be >= 1"):
        opt.repartition(0)
    with pytest.raises(layerps.InvalidArgumentError, match="partitions for 40 rows"):
        opt.repartition(ROWS + 1)

    # All-gathering takes sparse gradients only.
    m = Net(0)
    opt = lt.DistributedOptimizer(sgd(m), m.named_parameters(), worker=worker, name="gather",
                                  routes={"fc.weight": "allgather"})
    with pytest.raises(layerps.InvalidArgumentError, match="'fc.weight': route 'allgather' takes sparse"):
        first_step(opt, m)
    # The modes through the servers' dense tables refuse sparse gradients.
    m = Net(0)
    opt = lt.DistributedOptimizer(sgd(m), m.named_parameters(), worker=worker, name="agg1", mode="aggregate")
    with pytest.raises(layerps.InvalidArgumentError, match="'emb.weight' has a sparse gradient"):
        first_step(opt, m)

    # A torch optimizer the servers have no rule for, on a sparse parameter.
    m = Net(0)
    rms = torch.optim.RMSprop(m.parameters(), lr=0.01)
    opt = lt.DistributedOptimizer(rms, m.named_parameters(), worker=worker, name="rms")
    with pytest.raises(layerps.InvalidArgumentError, match="no rule for RMSprop"):
        first_step(opt, m)
    # ... which routes='allreduce' accepts (densified, stepped locally).
    m = Net(0)
    rms = torch.optim.RMSprop(m.parameters(), lr=0.01)
    opt = lt.DistributedOptimizer(rms, m.named_parameters(), worker=worker, name="rms2",
                                  routes={"emb.weight": "allreduce", "bag.weight": "allreduce"})
    first_step(opt, m)
    first_step(opt, m)
    opt.finish()


def test_repartition_keeps_every_row_and_training_goes_on():
    steps = 8
    ref = reference(steps, sgd)
    seen = {}

    def after(t, opt, model):
        if t == 2:
            before = opt.hybrid.sparse_params[0]
            old_tables = list(before.tables)
            opt.pull_sparse_params()
            held = model.emb.weight.detach().clone()
            opt.repartition(5)
            # The old tables were dropped: the servers no longer hold them.
            with pytest.raises(layerps.NotFoundError):
                opt.worker.pull_sparse(old_tables[0], np.arange(4, dtype=np.int64)).wait()
            assert opt.partitions == {"emb.weight": 5, "bag.weight": 5}
            assert before.tables[0].name.endswith("/P5/0") and len(before.tables) == 5
            model.emb.weight.data.zero_()  # forget the local copy: the servers must have it all
            opt.pull_sparse_params()
            seen[opt.worker.rank] = torch.equal(model.emb.weight.detach(), held)
        if t == 5:
            opt.repartition(1, names=["bag.weight"])
            assert opt.partitions == {"emb.weight": 5, "bag.weight": 1}

    with layerps.LocalCluster(num_servers=2, num_workers=2, **FAST) as c:
        out = run_parallel(lambda w: train(w, steps, sgd, name="rep", after_step=after), [(w,) for w in c.workers])
    assert seen == {0: True, 1: True}
    assert_equal_to([v for v, _ in out], ref)


def repartition_in_flight(rows, K, lr=0.1, transport="inproc"):
    """Pushes that every worker started on the old tables and did not wait for are in the
    new ones: repartition flushes each worker's requests, then copies. None is lost (the
    old tables are dropped after the copy) and none is applied twice. Returns how many
    pushes were still in flight when repartition was called, at most, over the workers."""

    def run(w):
        model = Net(w.rank, rows)
        opt = lt.DistributedOptimizer(sgd(model), model.named_parameters(), worker=w, name="flight")
        ids, y = batch(0, rows)
        opt.zero_grad()
        loss_of(model, ids, y).backward()
        opt.step()  # the sparse tables exist, and this step's pushes are applied
        opt.pull_sparse_params()
        before = model.emb.weight.detach().clone()
        w.barrier("workers", 60)  # every worker read the same rows before anyone pushes more
        sp = next(s for s in opt.hybrid.sparse_params if s.name == "emb.weight")
        P = len(sp.tables)
        keys = torch.arange(rows, dtype=torch.int64)
        grad = torch.full((rows, DIM), float(w.rank + 1))
        parts = [(t, keys[torch.remainder(keys, P) == k]) for k, t in enumerate(sp.tables)]
        # Started, not waited for, by the last rank only: the others' copying pulls then
        # travel on idle connections and, on a slow link, reach the servers long before
        # these pushes unless repartition waits for them.
        mine_k = K if w.rank == w.num_workers - 1 else 0
        handles = [w.push_sparse(t, mine, grad[:mine.numel()]) for _ in range(mine_k) for t, mine in parts]
        in_flight = sum(not h.done() for h in handles)
        opt.repartition(P + 1)
        for h in handles:
            h.wait(60)  # each push succeeded: none reached a dropped table
        model.emb.weight.data.zero_()
        opt.pull_sparse_params()
        after = model.emb.weight.detach().clone()
        opt.finish()
        return before, after, in_flight

    with layerps.LocalCluster(num_servers=2, num_workers=2, transport=transport, **FAST) as c:
        out = run_parallel(run, [(w,) for w in c.workers])
    total = len(out) * K  # K pushes of (rank + 1) from the last rank
    for before, after, _ in out:
        torch.testing.assert_close(after, before - lr * total, rtol=0, atol=1e-4)
    return max(n for _, _, n in out)


def test_repartition_loses_no_push_in_flight():
    # In process the pushes may all be done by the time repartition starts; the slow-link
    # version below makes sure they are not.
    repartition_in_flight(100000, 16)


# A loopback of its own where data is slow and control is not: packets of 2 KiB and more
# (tot_len bits 0xf800 of the IP header) share 200 Mbit/s behind a short queue, smaller
# ones (barriers, maps, acks) pass at once. MTU and GSO at 16 KiB keep every packet's
# tot_len exact.
_SLOW_DATA_LOOPBACK = " && ".join(
    ["ip link set lo up", "ip link set lo mtu 16384 gso_max_size 16384",
     "tc qdisc add dev lo root handle 1: htb default 10 r2q 1000",
     "tc class add dev lo parent 1: classid 1:10 htb rate 10gbit",
     "tc class add dev lo parent 1: classid 1:20 htb rate 200mbit burst 256kb",
     "tc qdisc add dev lo parent 1:20 handle 20: pfifo limit 16"]
    + [f"tc filter add dev lo parent 1: protocol ip prio 1 u32 match u16 {b:#06x} {b:#06x} at 2 flowid 1:20"
       for b in (0x8000, 0x4000, 0x2000, 0x1000, 0x0800)])


def test_repartition_loses_no_push_in_flight_on_a_slow_link():
    """The same where the pushes are still on their way when the copy starts: only the
    flush keeps the other worker's copy from reading the rows before them (without it,
    half the rows lack the pushes)."""
    import os
    import shutil
    import subprocess
    import sys
    if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("tc") and shutil.which("ip")):
        pytest.skip("needs root, unshare and iproute2")
    here = os.path.dirname(os.path.abspath(__file__))
    body = (f"import sys; sys.path.insert(0, {here!r}); import test_hybrid; "
            f"print('in flight', test_hybrid.repartition_in_flight(100000, 32, transport='tcp'))")
    shell = f"{{ {_SLOW_DATA_LOOPBACK}; }} 2>/dev/null || exit 42; exec {sys.executable} -c \"{body}\""
    r = subprocess.run(["unshare", "-n", "sh", "-c", shell], capture_output=True, text=True, timeout=240)
    if r.returncode == 42 or (r.returncode == 1 and r.stderr.startswith("unshare:")):
        pytest.skip(f"cannot shape a loopback of its own here: {r.stderr[-500:]}")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert int(r.stdout.split("in flight")[1].split()[0]) > 0


def test_partition_search_is_within_ten_percent_of_the_exhaustive_best():
    rng = np.random.default_rng(0)
    for case in range(40):
        a = rng.uniform(0.001, 0.05)
        b = rng.uniform(0.1, 4.0)
        c = rng.uniform(0.0, 1.0)
        machines = int(rng.integers(1, 9))
        p_max = 128
        noise = rng.uniform(0, 0.02)

        def cost(p):
            return a * (p - 1) + b / p + c

        calls = []

        def measure(p):
            calls.append(p)
            return cost(p) * (1 + noise * rng.standard_normal())

        pick, history = partition.search(measure, machines, p_min=1, p_max=p_max)
        best = min(cost(p) for p in range(1, p_max + 1))
        assert cost(pick) <= 1.1 * best, (case, a, b, c, machines, pick, history)
        assert len(calls) == len(set(calls)) <= 12  # a search, not a sweep
        assert calls[0] == machines


def test_partition_search_steps_and_fit():
    # Doubling from P0 while it improves, then the fit picks between the tried points.
    a, b, c = 0.01, 2.0, 0.5
    pick, history = partition.search(lambda p: a * (p - 1) + b / p + c, machines=2, p_max=64)
    assert [p for p, _ in history][:4] == [2, 4, 8, 16]
    assert pick == 14 and 14 in dict(history)  # argmin of the exact curve, measured to confirm
    fit = partition.fit_cost(history)
    assert np.allclose(fit, (a, b, c), atol=1e-9)
    # Halving when doubling does not help.
    pick, history = partition.search(lambda p: 0.5 * (p - 1) + 1.0 / p, machines=8, p_max=64)
    assert [p for p, _ in history][:2] == [8, 16] and pick == 1
    # Bounds and bad input.
    pick, history = partition.search(lambda p: 1.0 / p, machines=2, p_max=6)
    assert pick == 4 and max(p for p, _ in history) <= 6
    with pytest.raises(layerps.InvalidArgumentError):
        partition.search(lambda p: 1.0, machines=1, p_min=0)
    with pytest.raises(layerps.InvalidArgumentError):
        partition.search(lambda p: math.nan, machines=1)
    with pytest.raises(layerps.InvalidArgumentError, match="three distinct"):
        partition.fit_cost([(1, 1.0), (2, 0.5)])


def test_search_partitions_runs_real_steps():
    with layerps.LocalCluster(num_servers=2, num_workers=2, **FAST) as c:
        def work(w):
            model = Net(w.rank)
            opt = lt.DistributedOptimizer(sgd(model), model.named_parameters(), worker=w, name="search")
            ids, y = batch(0)

            def trial():
                opt.zero_grad()
                loss_of(model, ids[w.rank::2], y[w.rank::2]).backward()
                opt.step()

            trial()  # the first step routes the parameters
            pick, history = opt.search_partitions(trial, steps=1, warmup=0, p_max=8)
            opt.finish()
            return pick, history, opt.partitions

        (p0, h0, parts0), (p1, h1, parts1) = run_parallel(work, [(w,) for w in c.workers], timeout=120)
    assert p0 == p1 and h0 == h1  # every worker decided on the same numbers
    assert 1 <= p0 <= 8 and parts0 == {"emb.weight": p0, "bag.weight": p0}
    assert h0[0][0] == 2  # P0 = max(number of servers, p_min)



def run_three_workers(script_text, tmp_path):
    """Runs `script_text` as 3 worker processes of a cluster of 1 server (this process),
    heartbeat timeout 1 s, request timeout 30 s; returns {rank: the JSON each wrote to
    r{rank}.json} and the processes' output."""
    import json
    import subprocess
    import sys

    script = tmp_path / "workers.py"
    script.write_text(script_text)
    hb = dict(heartbeat_interval_ms=100, heartbeat_timeout_ms=1000, connect_timeout_ms=20000,
              request_timeout_ms=30000)
    sched = layerps.Scheduler("tcp://127.0.0.1:0", num_servers=1, num_workers=3, **hb)
    server = layerps.Server(sched.address, start=False, **hb)
    started = server.start_async()
    out = str(tmp_path / "r{rank}.json")
    procs = [subprocess.Popen([sys.executable, str(script), sched.address, out], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for _ in range(3)]
    try:
        started.result(timeout=60)
        logs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        server.stop()
        sched.stop()
    return {r: json.loads((tmp_path / f"r{r}.json").read_text())
            for r in range(3) if (tmp_path / f"r{r}.json").exists()}, logs


DYING = """
import json, os, signal, sys, time
import torch
import layerps, layerps.torch as lt
addr, out = sys.argv[1], sys.argv[2]
w = layerps.Worker(addr, heartbeat_interval_ms=100, heartbeat_timeout_ms=1000, connect_timeout_ms=20000,
                   request_timeout_ms=30000)
model = torch.nn.ModuleDict({"emb": torch.nn.Embedding(20, 4, sparse=True), "fc": torch.nn.Linear(4, 1)})
opt = lt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model.named_parameters(), worker=w,
                              name="dying", hosts=["a", "a", "a"])

def step():
    opt.zero_grad()
    model["fc"](model["emb"](torch.tensor([w.rank, 5]))).sum().backward()
    opt.step()

step()
if w.rank == 2:
    os.kill(os.getpid(), signal.SIGKILL)  # dies without leaving
t0 = time.monotonic()
result = {"rank": w.rank, "error": None}
try:
    for _ in range(50):
        step()
except Exception as e:
    result.update(error=type(e).__name__, seconds=time.monotonic() - t0, message=str(e))
json.dump(result, open(out.format(rank=w.rank), "w"))
w.stop()
"""


def test_a_worker_dying_during_local_aggregation_fails_the_others_within_the_heartbeat_timeout(tmp_path):
    """Three worker processes on one host; rank 2 is SIGKILLed after the first step. Its
    leader waits for its rows and rank 1 for the host's all-reduce: both fail with
    UnavailableError once the scheduler declares it dead (heartbeat timeout 1 s; the
    request timeout, 30 s, is not what ends them)."""
    results, logs = run_three_workers(DYING, tmp_path)
    assert sorted(results) == [0, 1], logs  # rank 2 died before writing
    for r, res in results.items():
        print(f"rank {r}: {res['error']} after {res.get('seconds', 0):.2f} s: {res.get('message')}")
        assert res["error"] == "UnavailableError", res
        assert res["seconds"] < 6, res


def test_server_rules_follow_the_torch_optimizer():
    from layerps.hybrid import server_rule

    p = nn.Parameter(torch.zeros(3, 2))
    assert server_rule(torch.optim.SGD([p], lr=0.3), p, "p") == ("sgd", {"lr": 0.3})
    assert server_rule(torch.optim.SGD([p], lr=0.3, momentum=0.8), p, "p") == ("momentum", {"lr": 0.3, "momentum": 0.8})
    assert server_rule(torch.optim.SGD([p], lr=0.3, momentum=0.8, nesterov=True), p, "p")[0] == "nesterov"
    assert server_rule(torch.optim.Adagrad([p], lr=0.1, eps=1e-10), p, "p") == ("adagrad", {"lr": 0.1, "epsilon": 1e-10})
    rule, hyper = server_rule(torch.optim.SparseAdam([p], lr=0.01, betas=(0.8, 0.99), eps=1e-7), p, "p")
    assert rule == "adam" and hyper == {"lr": 0.01, "beta1": 0.8, "beta2": 0.99, "epsilon": 1e-7}
    for bad, why in [(torch.optim.SGD([p], lr=0.1, weight_decay=0.1), "weight decay"),
                     (torch.optim.SGD([p], lr=0.1, momentum=0.9, dampening=0.5), "dampening"),
                     (torch.optim.Adam([p], amsgrad=True), "amsgrad"),
                     (torch.optim.Adagrad([p], lr_decay=0.1), "lr_decay")]:
        with pytest.raises(layerps.InvalidArgumentError, match=why):
            server_rule(bad, p, "p")
    q = nn.Parameter(torch.zeros(1))
    with pytest.raises(layerps.InvalidArgumentError, match="not in the wrapped optimizer"):
        server_rule(torch.optim.SGD([p], lr=0.1), q, "q")


@pytest.mark.filterwarnings("ignore:Detected call of")  # the schedulers are made after a step
def test_an_lr_scheduler_reaches_the_server_held_rows():
    # StepLR halves the lr every 2 steps: the servers' rule for the embedding rows follows
    # (Worker.set_learning_rate), so the result equals one process with the same schedule.
    steps = 6
    model = Net(0)
    opt = sgd(model)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    for t in range(steps):
        opt.zero_grad()
        loss_of(model, *batch(t)).backward()
        opt.step()
        sched.step()
    ref = {k: v.detach().clone() for k, v in model.state_dict().items()}
    scheds = {}

    def after(t, o, m):
        if o.worker.rank not in scheds:
            scheds[o.worker.rank] = torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5)
            scheds[o.worker.rank].last_epoch = t  # created after step t: catch up (no lr change yet)
        scheds[o.worker.rank].step()

    with layerps.LocalCluster(num_servers=2, num_workers=2, **FAST) as c:
        out = run_parallel(lambda w: train(w, steps, sgd, name="lrsched", after_step=after), [(w,) for w in c.workers])
    assert_equal_to([v for v, _ in out], ref)


KILLED_MID_COLLECTIVE = """
import json, os, signal, sys, time
import numpy as np
import layerps
from layerps import collectives as C
addr, out = sys.argv[1], sys.argv[2]
w = layerps.Worker(addr, heartbeat_interval_ms=100, heartbeat_timeout_ms=1000, connect_timeout_ms=20000,
                   request_timeout_ms=30000)
metric = np.array([float(w.rank)], dtype=np.float64)
C.allreduce(metric, op=C.Average, worker=w)   # every typed kind once, all alive
ids = C.allgather(np.arange(3, dtype=np.int64) + w.rank, worker=w)
big = np.full(8 << 20, w.rank, dtype=np.float32)  # 32 MiB: many segments
result = {"rank": w.rank, "metric": float(metric[0]), "ids": ids.tolist(), "error": None}
if w.rank == 2:
    C.allgather_async(big, worker=w)  # its first segments go out, then it dies
    os.kill(os.getpid(), signal.SIGKILL)
t0 = time.monotonic()
try:
    for _ in range(20):
        C.allgather(big, worker=w)
except Exception as e:
    result.update(error=type(e).__name__, seconds=time.monotonic() - t0, message=str(e))
json.dump(result, open(out.format(rank=w.rank), "w"))
w.stop()
"""


def test_a_worker_killed_mid_collective_fails_the_others_within_the_heartbeat_timeout(tmp_path):
    """Three worker processes run typed collectives (a float64 average, an int64
    all-gather: exact values), then rank 2 starts a 32 MiB all-gather and is SIGKILLed
    while its segments are on the way: ranks 0 and 1, inside the same all-gather, fail
    with UnavailableError once the scheduler declares it dead (heartbeat timeout 1 s),
    not at the request timeout (30 s)."""
    results, logs = run_three_workers(KILLED_MID_COLLECTIVE, tmp_path)
    assert sorted(results) == [0, 1], logs  # rank 2 died before writing
    for r, res in results.items():
        assert res["metric"] == 1.0 and res["ids"] == [0, 1, 2, 1, 2, 3, 2, 3, 4], res
        assert res["error"] == "UnavailableError", res
        assert res["seconds"] < 10, res
