"""layerps.torch.DistributedOptimizer as Horovod users know it (issue 16 item 1): a real
torch.optim.Optimizer sharing the wrapped optimizer's groups and state, pushes started
from gradient hooks during backward (mode 'aggregate'), backward_passes_per_step,
broadcast_optimizer_state and rank()/size()/local_rank()/local_size()."""

import pytest
import torch

import layerps
import layerps.torch as lt
from conftest import run_parallel


def model_for(seed):
    g = torch.Generator().manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return m


def batch(rank, step):
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(8, 6, generator=g), torch.randn(8, 2, generator=g)


def loss_of(m, rank, step):
    x, y = batch(rank, step)
    return torch.nn.functional.mse_loss(m(x), y)


def test_it_is_a_torch_optimizer_sharing_the_wrapped_groups_and_state(worker):
    m = model_for(0)
    inner = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    opt = lt.DistributedOptimizer(inner, m.named_parameters(), worker=worker, name="isa", mode="aggregate")
    assert isinstance(opt, torch.optim.Optimizer)
    assert opt.param_groups is inner.param_groups
    assert opt.state is inner.state
    assert opt.defaults is inner.defaults
    loss_of(m, 0, 0).backward()
    opt.step()
    assert set(opt.state_dict()["state"]) == {0, 1, 2, 3}  # momentum buffers, the wrapped one's
    opt.finish()


@pytest.mark.parametrize("mode", ["aggregate", "server"])
def test_an_lr_scheduler_changes_the_lr_the_step_uses(cluster, mode):
    # mode='server': the servers apply x -= lr * g and the scheduler's lr reaches them.
    def work(w):
        p = torch.nn.Parameter(torch.zeros(3))
        opt = lt.DistributedOptimizer(torch.optim.SGD([p], lr=1.0), [("p", p)], worker=w,
                                      name=f"sched_{mode}", mode=mode)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        deltas = []
        for t in range(3):
            before = p.detach().clone()
            p.grad = torch.full((3,), float(2 * (w.rank + 1)))  # average over 2 workers: 3
            opt.step()
            sched.step()
            deltas.append(float((before - p.detach())[0]))
        opt.finish()
        return deltas

    for deltas in run_parallel(work, [(w,) for w in cluster.workers]):
        assert deltas == [3.0, 1.5, 0.75]


def test_set_learning_rate_keeps_the_rules_state_and_checks_its_input(worker):
    import numpy as np
    t = worker.declare_dense("lr_mom", 2, "momentum", lr=1.0, momentum=0.5)
    worker.push(t, np.ones(2, np.float32)).wait()   # b = 1, x = -1
    worker.set_learning_rate(t, 0.5)
    worker.push(t, np.ones(2, np.float32)).wait()   # b = 0.5 + 1 = 1.5, x = -1 - 0.75
    assert worker.pull(t).wait().tolist() == [-1.75, -1.75]
    assert worker.table("lr_mom").spec.learning_rate == 1.0  # as declared
    worker.declare_dense("lr_mom", 2, "momentum", lr=1.0, momentum=0.5)  # the same spec again
    with pytest.raises(layerps.InvalidArgumentError, match="no learning rate"):
        worker.set_learning_rate(worker.declare_dense("lr_sum", 2), 0.1)
    with pytest.raises(layerps.InvalidArgumentError, match="finite"):
        worker.set_learning_rate(t, float("nan"))
    with pytest.raises(layerps.NotFoundError):
        worker.set_learning_rate(98765, 0.1)


def test_state_dict_round_trips(worker):
    m = model_for(1)
    opt = lt.DistributedOptimizer(torch.optim.Adam(m.parameters(), lr=0.01), m.named_parameters(),
                                  worker=worker, name="sd1", mode="aggregate")
    for t in range(3):
        opt.zero_grad()
        loss_of(m, 0, t).backward()
        opt.step()
    sd = opt.state_dict()
    m2 = model_for(1)
    opt2 = lt.DistributedOptimizer(torch.optim.Adam(m2.parameters(), lr=0.5), m2.named_parameters(),
                                   worker=worker, name="sd2", mode="aggregate")
    opt2.load_state_dict(sd)
    assert opt2.param_groups[0]["lr"] == 0.01
    sd2 = opt2.state_dict()
    assert sd2["state"].keys() == sd["state"].keys()
    for k in sd["state"]:
        for name in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(sd2["state"][k][name], sd["state"][k][name])
    opt.finish()
    opt2.finish()


def test_hooks_push_each_gradient_during_backward(cluster):
    def work(w, overlap):
        m = model_for(2)
        opt = lt.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), m.named_parameters(), worker=w,
                                      name=f"hooks{overlap}", mode="aggregate", overlap=overlap)
        before = w.stats()["bytes_sent"]
        loss_of(m, w.rank, 0).backward()
        pushed_in_backward = w.stats()["bytes_sent"] - before
        hook_pushes = opt.hook_pushes
        opt.step()
        after_step = w.stats()["bytes_sent"] - before
        opt.finish()
        return hook_pushes, pushed_in_backward, after_step

    nbytes = 4 * sum(p.numel() for p in model_for(2).parameters())
    for hook_pushes, in_backward, after_step in run_parallel(work, [(w, True) for w in cluster.workers]):
        assert hook_pushes == 4
        assert in_backward >= nbytes  # every gradient left before step() was called
    for hook_pushes, in_backward, after_step in run_parallel(work, [(w, False) for w in cluster.workers]):
        assert hook_pushes == 0
        assert in_backward == 0
        assert after_step >= nbytes


def test_backward_passes_per_step_accumulates_before_pushing(cluster):
    def work(w):
        p = torch.nn.Parameter(torch.zeros(4))
        opt = lt.DistributedOptimizer(torch.optim.SGD([p], lr=1.0), [("p", p)], worker=w, name="bpps",
                                      mode="aggregate", backward_passes_per_step=2)
        counts = []
        for k in range(2):
            (p * float(w.rank + 1 + k)).sum().backward()  # gradient rank+1, then rank+2
            counts.append(opt.hook_pushes)
        grad_sum = p.grad.clone()
        opt.step()
        opt.finish()
        return counts, grad_sum, p.detach().clone()

    results = run_parallel(work, [(w,) for w in cluster.workers])
    # Rank r pushes (r+1) + (r+2) = 2r + 3: ranks 0 and 1 -> 3 and 5, averaged 4.
    for counts, grad_sum, p in results:
        assert counts == [0, 1]  # nothing pushed after the first pass, pushed after the second
        assert torch.equal(p, torch.full((4,), -4.0))
    assert sorted(float(g[0]) for _, g, _ in results) == [3.0, 5.0]


def test_broadcast_optimizer_state_makes_every_rank_equal_root(cluster):
    def work(w):
        m = model_for(3)
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        for t in range(2 + w.rank):  # different local histories
            opt.zero_grad()
            loss_of(m, w.rank, t).backward()
            opt.step()
        opt.param_groups[0]["lr"] = 0.1 * (w.rank + 1)
        lt.broadcast_optimizer_state(opt, root_rank=0, worker=w)
        return w.rank, opt.state_dict()

    states = dict(run_parallel(work, [(w,) for w in cluster.workers]))
    s0, s1 = states[0], states[1]
    assert s1["param_groups"][0]["lr"] == s0["param_groups"][0]["lr"] == 0.1
    for k in s0["state"]:
        assert torch.equal(s1["state"][k]["momentum_buffer"], s0["state"][k]["momentum_buffer"])


def test_overlap_changes_nothing_in_the_result(cluster):
    """The hooks only move when the pushes start: the parameters after training are the
    same with and without them, bit for bit."""
    def work(w, overlap):
        m = model_for(4)
        opt = lt.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9),
                                      m.named_parameters(), worker=w, name=f"same{overlap}",
                                      mode="aggregate", overlap=overlap)
        for t in range(5):
            opt.zero_grad()
            loss_of(m, w.rank, t).backward()
            opt.step()
        opt.finish()
        return [p.detach().clone() for p in m.parameters()]

    with_hooks = run_parallel(work, [(w, True) for w in cluster.workers])
    without = run_parallel(work, [(w, False) for w in cluster.workers])
    for a, b in zip(with_hooks, without):
        for x, y in zip(a, b):
            assert torch.equal(x, y)
    for x, y in zip(with_hooks[0], with_hooks[1]):
        assert torch.equal(x, y)  # the workers agree


def test_rank_size_local_rank_local_size(cluster):
    ws = sorted(cluster.workers, key=lambda w: w.rank)
    assert [lt.rank(w) for w in ws] == [0, 1]
    assert {lt.size(w) for w in ws} == {2}
    # In-process workers share the host.
    assert [lt.local_rank(w) for w in ws] == [0, 1]
    assert {lt.local_size(w) for w in ws} == {2}


def test_bad_arguments(worker):
    p = torch.nn.Parameter(torch.zeros(2))
    with pytest.raises(layerps.InvalidArgumentError, match="backward_passes_per_step"):
        lt.DistributedOptimizer(torch.optim.SGD([p], lr=1.0), [("p", p)], worker=worker, mode="aggregate",
                                backward_passes_per_step=0)
    with pytest.raises(layerps.InvalidArgumentError, match="torch.optim.Optimizer"):
        lt.DistributedOptimizer(object(), [("p", p)], worker=worker, mode="aggregate")


def test_more_backward_passes_than_declared_is_refused(worker):
    p = torch.nn.Parameter(torch.zeros(2))
    opt = lt.DistributedOptimizer(torch.optim.SGD([p], lr=1.0), [("p", p)], worker=worker, name="over",
                                  mode="aggregate")
    p.sum().backward()
    p.sum().backward()  # the second pass's gradient would not be pushed
    with pytest.raises(layerps.FailedPreconditionError, match="backward_passes_per_step=1"):
        opt.step()
    opt.finish()


def test_aggregate_steps_go_on_after_a_worker_joins(cluster):
    """Uneven inputs: rank 1 has one batch, rank 0 three. After rank 1 joins, rank 0's
    steps go on (its barrier counts 1 participant); the joined worker counts as a zero
    gradient (the average still divides by size(), as Horovod's join)."""
    def work(w):
        # Two parameters: each rank zeroes one of them between steps while both are there;
        # after rank 1 joined, its share must still be zeroed (7 steps: the 3-table
        # rotation comes round twice).
        p = torch.nn.Parameter(torch.zeros(2))
        q = torch.nn.Parameter(torch.zeros(3))
        opt = lt.DistributedOptimizer(torch.optim.SGD([p, q], lr=1.0), [("p", p), ("q", q)], worker=w,
                                      name="uneven", mode="aggregate")
        grads = []
        for t in range(7 if w.rank == 0 else 1):
            opt.zero_grad()
            ((p * 4.0).sum() + (q * 6.0).sum()).backward()
            opt.step()
            grads.append((float(p.grad[0]), float(q.grad[0])))
        opt.finish()
        return w.rank, grads, w.join(timeout=20)

    results = {r: (g, j) for r, g, j in run_parallel(work, [(w,) for w in cluster.workers], timeout=60)}
    assert results[1] == ([(4.0, 6.0)], 2)
    assert results[0] == ([(4.0, 6.0)] + [(2.0, 3.0)] * 6, 2)
