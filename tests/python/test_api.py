"""The core API on in-process clusters: dense and sparse requests, numpy and torch,
handles, barriers, and the errors bad arguments raise (without changing anything)."""

import builtins
import gc
import os
import threading
import time

import numpy as np
import pytest
import torch

import layerps
from conftest import FAST, REPO, run_parallel


def test_installed_package_is_used():
    here = os.path.dirname(os.path.abspath(layerps.__file__))
    assert not here.startswith(str(REPO / "bindings")), here
    for tool in ("layerps-scheduler", "layerps-server", "layerps-launch"):
        assert os.access(layerps.tool_path(tool), os.X_OK)


@pytest.mark.parametrize("transport", ["inproc", "tcp", "ipc"])
def test_dense_push_pull_sum_over_workers(transport):
    with layerps.LocalCluster(num_servers=2, num_workers=2, transport=transport, dense_chunk_elems=64,
                              **FAST) as c:
        assert [w.rank for w in c.workers] == [0, 1]
        assert all(w.num_workers == 2 and w.num_servers == 2 for w in c.workers)

        def work(w):
            t = w.declare_dense("x", 1000, "sum")  # 16 chunks over 2 servers
            w.push(t, np.full(1000, w.rank + 1, np.float32)).wait()
            w.barrier()
            return w.pull(t).wait()

        a, b = run_parallel(work, [(w,) for w in c.workers])
        np.testing.assert_array_equal(a, np.full(1000, 3, np.float32))
        np.testing.assert_array_equal(b, a)


def test_pushpull_assign_and_sgd(worker):
    t = worker.declare_dense("p", 10, "sum")
    worker.assign(t, np.arange(10, dtype=np.float32)).wait()
    out = worker.pushpull(t, np.ones(10, np.float32)).wait()
    np.testing.assert_array_equal(out, np.arange(10) + 1)
    s = worker.declare_dense("s", 4, "sgd", lr=0.5)
    worker.assign(s, np.array([1, 2, 3, 4], np.float32)).wait()
    worker.push(s, np.array([2, 2, 2, 2], np.float32)).wait()
    np.testing.assert_array_equal(worker.pull(s).wait(), [0, 1, 2, 3])
    assert repr(s).startswith("<layerps.Table 's'")


def test_table_methods_and_shapes(worker):
    t = worker.declare_dense("m", 12)
    t.push(np.ones((3, 4), np.float32)).wait()  # any shape with the right element count
    out = np.empty((4, 3), np.float32)
    assert t.pull(out).wait() is out
    np.testing.assert_array_equal(out, 1)
    assert worker.table("m") is t


def test_sparse_rows_keys_and_duplicates(worker):
    t = worker.declare_sparse("emb", 3, "sum")
    keys = np.array([5, 2**63 + 7, 5, 11], np.uint64)
    rows = np.arange(12, dtype=np.float32).reshape(4, 3)
    worker.push_sparse(t, keys, rows).wait()
    got = worker.pull_sparse(t, keys).wait()
    assert got.shape == (4, 3)
    np.testing.assert_array_equal(got[0], rows[0] + rows[2])  # duplicates summed on push
    np.testing.assert_array_equal(got[2], got[0])               # and each gets a copy on pull
    np.testing.assert_array_equal(got[1], rows[1])
    # int64 keys are the same 64-bit ids (two's complement), without a copy.
    signed = keys.view(np.int64)
    assert signed[1] < 0
    np.testing.assert_array_equal(worker.pull_sparse(t, signed).wait(), got)
    # torch keys give torch rows; a flat rows buffer is accepted too.
    tk = torch.tensor([11, 5])
    tr = worker.pull_sparse(t, tk).wait()
    assert isinstance(tr, torch.Tensor) and tr.shape == (2, 3)
    worker.assign_sparse(t, np.array([11], np.uint64), np.zeros(3, np.float32)).wait()
    np.testing.assert_array_equal(worker.pull_sparse(t, [11]).wait(), [[0, 0, 0]])
    assert worker.pull_sparse(t, np.array([], np.uint64)).wait().shape == (0, 3)


def test_sparse_initializers_agree_across_workers(cluster):
    def work(w):
        t = w.declare_sparse("init", 4, "sgd", lr=0.1, init="normal", init_a=1.0, init_b=0.5, seed=7)
        return w.pull_sparse(t, np.arange(100, dtype=np.uint64)).wait()

    a, b = run_parallel(work, [(w,) for w in cluster.workers])
    np.testing.assert_array_equal(a, b)
    assert abs(a.mean() - 1.0) < 0.2 and 0.3 < a.std() < 0.7


def test_torch_tensors_are_used_in_place(worker):
    t = worker.declare_dense("tt", 6)
    g = torch.arange(6, dtype=torch.float32, requires_grad=True)
    worker.push(t, g).wait()
    out = torch.zeros(2, 3)
    ptr = out.data_ptr()
    r = worker.pull(t, out).wait()
    assert r is out and out.data_ptr() == ptr
    assert out.flatten().tolist() == [0, 1, 2, 3, 4, 5]
    # Non-contiguous float32 inputs are copied once; outputs must be usable in place.
    worker.push(t, torch.ones(3, 2).t()).wait()
    np.testing.assert_array_equal(worker.pull(t).wait(), np.arange(6) + 1)
    assert worker.stats()["payload_copies"] == 0


def test_handle_keeps_buffers_alive_and_dropped_handles_are_parked(worker):
    t = worker.declare_dense("alive", 100000)
    h = worker.push(t, np.ones(100000, np.float32))  # nobody else holds the array
    gc.collect()
    assert h.wait(timeout=10) is None
    assert h.done()
    for _ in range(20):
        worker.pull(t)  # handle dropped at once: the output is parked until the reply
    gc.collect()
    worker.pull(t).wait()
    deadline = time.time() + 5
    while worker.parked_requests and time.time() < deadline:
        worker.pull(t).wait()  # each request releases the parked ones that completed
    assert worker.parked_requests == 0
    np.testing.assert_array_equal(worker.pull(t).wait(), 1)


BAD_DENSE = [
    (lambda: np.ones(10, np.float64), "expected float32 values, got dtype float64"),
    (lambda: np.ones(9, np.float32), "the table has 10 elements, the array has 9"),
    (lambda: np.ones((2, 6), np.float32), "the array has 12 (shape (2, 6))"),
    (lambda: torch.ones(10, dtype=torch.float16), "expected a float32 tensor, got torch.float16"),
    (lambda: torch.ones(10, dtype=torch.int64), "expected a float32 tensor"),
    (lambda: "ten", "expected a numpy array or a torch tensor, got str"),
]


@pytest.mark.parametrize("make,message", BAD_DENSE)
def test_bad_dense_input_raises_and_changes_nothing(worker, make, message):
    t = worker.declare_dense("guarded", 10)
    worker.assign(t, np.arange(10, dtype=np.float32)).wait()
    sent = worker.stats()["requests_sent"]
    for op in (worker.push, worker.assign, worker.pushpull):
        with pytest.raises(layerps.InvalidArgumentError, match=message.replace("(", r"\(").replace(")", r"\)")):
            op(t, make())
    assert worker.stats()["requests_sent"] == sent  # nothing was sent
    np.testing.assert_array_equal(worker.pull(t).wait(), np.arange(10))


def test_bad_outputs_and_keys(worker):
    t = worker.declare_dense("out", 10)
    s = worker.declare_sparse("rows", 4)
    ro = np.zeros(10, np.float32)
    ro.setflags(write=False)
    shared = np.zeros(10, np.float32)
    cases = [
        (lambda: worker.pull(t, ro), "read-only"),
        (lambda: worker.pull(t, np.zeros(20, np.float32)[::2]), "C-contiguous"),
        (lambda: worker.pull(t, torch.zeros(5, 2).t()), "must be contiguous"),
        (lambda: worker.pull(t, np.zeros(10, np.float64)), "float64"),
        (lambda: worker.pull(t, np.zeros(11, np.float32)), "the table has 10 elements"),
        (lambda: worker.pushpull(t, shared, shared), "must not share memory"),
        (lambda: worker.pull_sparse(s, np.array([1.5, 2.0])), "integer keys"),
        (lambda: worker.pull_sparse(s, torch.tensor([1.0])), "integer tensor"),
        (lambda: worker.push_sparse(s, [1, 2], np.ones((2, 3), np.float32)),
         r"expected shape \(2, 4\) .* got shape \(2, 3\)"),
        (lambda: worker.pull_sparse(s, [1, 2], np.zeros((3, 4), np.float32)), r"expected shape \(2, 4\)"),
        (lambda: worker.push(s, np.ones(4, np.float32)), "is sparse; use push_sparse"),
        (lambda: worker.pull_sparse(t, [1]), "is dense"),
        (lambda: worker.push(t, np.ones(10, np.float32)).wait(timeout=-1), "timeout must be >= 0"),
        (lambda: worker.barrier("nobody"), "barrier group"),
        (lambda: worker.declare_dense("bad", 4, rule="rmsprop"), "rule must be one of"),
        (lambda: worker.declare_dense("bad", 4, init="ones"), "init must be one of"),
        (lambda: worker.declare_dense("", 4), "name"),
        (lambda: worker.declare_dense("bad", 4, "sgd", lr=-1.0), "learning_rate"),
        (lambda: worker.push("x", np.ones(10, np.float32)), "expected a layerps.Table or a table id"),
    ]
    for fn, message in cases:
        with pytest.raises(layerps.InvalidArgumentError, match=message):
            fn()
    # InvalidArgumentError is a ValueError too.
    with pytest.raises(ValueError):
        worker.push(t, np.ones(3, np.float32))


def test_unknown_table_and_conflicting_declaration(worker):
    with pytest.raises(layerps.NotFoundError):
        worker.push(12345, np.ones(1, np.float32))
    with pytest.raises(LookupError):
        worker.table("nope")
    worker.declare_dense("same", 8, "sum")
    worker.declare_dense("same", 8, "sum")  # the same spec again is fine
    with pytest.raises(layerps.AlreadyExistsError, match="same"):
        worker.declare_dense("same", 9, "sum")


def test_drop_table_frees_the_name(worker):
    t = worker.declare_dense("dropme", 8, "sum")
    worker.push(t, np.full(8, 5.0, np.float32)).wait()
    worker.drop_table(t)
    with pytest.raises(layerps.NotFoundError):
        worker.pull(t).wait()
    with pytest.raises(LookupError):
        worker.table("dropme")
    with pytest.raises(layerps.NotFoundError, match="dropme"):
        worker.drop_table("dropme")
    t2 = worker.declare_dense("dropme", 9, "sum")  # another spec under the freed name
    assert (worker.pull(t2).wait() == 0.0).all()
    worker.drop_table("dropme")
    with pytest.raises(layerps.InvalidArgumentError):
        worker.drop_table(3)


def test_options_are_validated():
    with pytest.raises(layerps.InvalidArgumentError, match="unknown option 'heartbeat'"):
        layerps.make_options(heartbeat=5)
    with pytest.raises(layerps.InvalidArgumentError, match="heartbeat_timeout_ms"):
        layerps.make_options(heartbeat_interval_ms=1000, heartbeat_timeout_ms=1500)
    with pytest.raises(layerps.InvalidArgumentError):
        layerps.Scheduler(num_servers=-1)
    o = layerps.make_options(num_workers=3, token="s3cret")
    assert o.num_workers == 3 and o.token == "s3cret"
    assert layerps.make_options(o, num_servers=2).num_workers == 3


def test_options_from_env(monkeypatch):
    monkeypatch.setenv("LAYERPS_NUM_WORKERS", "4")
    monkeypatch.setenv("LAYERPS_SCHEDULER", "tcp://127.0.0.1:5555")
    o = layerps.Options.from_env()
    assert o.num_workers == 4 and o.scheduler_address == "tcp://127.0.0.1:5555"
    monkeypatch.setenv("LAYERPS_NUM_WORKERS", "four")
    with pytest.raises(layerps.InvalidArgumentError, match="LAYERPS_NUM_WORKERS"):
        layerps.Options.from_env()


def test_explicit_nodes_over_tcp_and_blocking_calls_release_the_gil():
    sched = layerps.Scheduler("tcp://127.0.0.1:0", num_servers=1, num_workers=2, **FAST)
    assert sched.address.startswith("tcp://127.0.0.1:") and not sched.address.endswith(":0")
    server = layerps.Server(sched, start=False, **FAST)
    workers = [layerps.Worker(sched.address, start=False, **FAST) for _ in range(2)]
    futures = [n.start_async() for n in [server] + workers]
    for f in futures:
        f.result(timeout=20)
    assert sorted(n.role.name for n in sched.nodes()) == ["SCHEDULER", "SERVER", "WORKER", "WORKER"]

    # While worker 0 waits at the barrier (GIL released), this thread keeps counting.
    ticks = []
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.005)

    counter = threading.Thread(target=count)
    counter.start()
    b = threading.Thread(target=workers[0].barrier)
    b.start()
    time.sleep(0.3)
    before = len(ticks)
    workers[1].barrier()
    b.join(10)
    stop.set()
    counter.join()
    assert before > 10, "the barrier held the GIL"

    for w in workers:
        w.stop()
    sched.join(timeout=10)  # returns once every worker left
    server.stop()
    sched.stop()


def test_barrier_timeout_raises_timeout_error():
    with layerps.LocalCluster(num_servers=1, num_workers=2, **FAST) as c:
        t0 = time.monotonic()
        with pytest.raises(layerps.TimeoutError) as e:
            c.workers[0].barrier(timeout=0.3)
        assert time.monotonic() - t0 < 3
        assert isinstance(e.value, builtins.TimeoutError) and isinstance(e.value, layerps.LayerPSError)
        assert e.value.code == "Timeout" and str(e.value).startswith("Timeout:")


def test_a_traceback_names_the_error_once():
    """`traceback` prints "module.Class: str(e)": the code is not repeated after a class
    whose name is the code (it was "IoError: IoError: ..."), and leads the others."""
    import traceback
    for cls in (layerps.IoError, layerps.ProtocolError, layerps.TimeoutError,
                layerps.InvalidArgumentError):
        try:
            raise cls("cold tier /x: cannot open")
        except layerps.LayerPSError as e:
            last = traceback.format_exception_only(type(e), e)[-1].strip()
        assert f"{cls.__name__}: {cls.__name__}:" not in last, last
        assert f"{cls.code}: {cls.code}:" not in last, last
        assert last.endswith("cold tier /x: cannot open"), last
    assert str(layerps.IoError()) == "IoError"
    assert str(layerps.TimeoutError("late")) == "Timeout: late"


def test_requests_after_stop_fail_cleanly():
    c = layerps.LocalCluster(num_servers=1, num_workers=1, **FAST)
    w = c.workers[0]
    t = w.declare_dense("late", 4)
    c.close()
    with pytest.raises(layerps.FailedPreconditionError, match="stopped"):  # was NotFoundError
        w.push(t, np.ones(4, np.float32)).wait(timeout=5)
    with pytest.raises(layerps.LayerPSError):
        w.barrier(timeout=1)


def test_default_worker_requires_init():
    with pytest.raises(layerps.FailedPreconditionError, match="layerps.init"):
        layerps.default_worker()


def test_init_without_a_launcher_says_what_to_do(monkeypatch):
    monkeypatch.delenv("LAYERPS_SCHEDULER", raising=False)
    with pytest.raises(layerps.FailedPreconditionError, match="layerps.launch"):
        layerps.init()


def test_every_option_field_of_the_binding_is_an_option_and_round_trips(monkeypatch):
    """Python takes its option fields from the binding: rank and shared_memory included
    (before, they were missing and LAYERPS_RANK from the launcher was dropped)."""
    assert {"rank", "shared_memory", "scheduler_address", "num_workers"} <= set(layerps.cluster.OPTION_FIELDS)
    o = layerps.make_options(rank=1, shared_memory=False)
    assert o.rank == 1 and o.shared_memory is False
    copy = layerps.make_options(o)
    for f in layerps.cluster.OPTION_FIELDS:
        assert getattr(copy, f) == getattr(o, f), f
    monkeypatch.setenv("LAYERPS_RANK", "2")
    monkeypatch.setenv("LAYERPS_SHARED_MEMORY", "0")
    e = layerps.make_options(from_env=True)
    assert e.rank == 2 and e.shared_memory is False


def test_launched_python_workers_have_the_launchers_ranks(tmp_path):
    from conftest import run_launched
    import sys
    script = tmp_path / "rank.py"
    script.write_text("import layerps\nw = layerps.init()\nprint(f'rank={w.rank}', flush=True)\nlayerps.shutdown()\n")
    p = run_launched(["-s", "1", "-w", "3", "--quiet_daemons", "--timeout_s=120", "--", sys.executable, str(script)])
    assert p.returncode == 0, p.stdout + p.stderr
    for i in range(3):
        assert f"[worker {i}] rank={i}" in p.stdout, p.stdout


def test_the_option_table_drives_the_environment_and_keywords(monkeypatch):
    """Every row of the C++ option table is a Python option field, read from its
    LAYERPS_* variable (booleans in any spelling) and taken as a keyword argument."""
    samples = {"scheduler_address": ("tcp://127.0.0.1:7001", "tcp://127.0.0.1:7001"),
               "bind_address": ("tcp://0.0.0.0", "tcp://0.0.0.0:0"),  # no port: any free one
               "advertise_host": ("node7", "node7"), "token": ("s3cret", "s3cret"),
               "curve_key_file": ("/tmp/cluster.key", "/tmp/cluster.key"), "cold_dir": ("/tmp/cold", "/tmp/cold"),
               "restore_dir": ("/tmp/ckpt-r", "/tmp/ckpt-r"), "checkpoint_keep": ("7", 7), "apply_threads": ("3", 3),
               "checkpoint_dir": ("/tmp/ckpt", "/tmp/ckpt"), "checkpoint_every_s": ("60", 60),
               "replace_servers_ms": ("20000", 20000), "replication": ("on", True),
               "num_servers": ("3", 3), "num_workers": ("5", 5), "max_workers": ("7", 7), "min_workers": ("2", 2), "rank": ("2", 2),
               "heartbeat_interval_ms": ("250", 250), "heartbeat_timeout_ms": ("4000", 4000), "scheduler_recovery_ms": ("45000", 45000),
               "stall_warning_ms": ("1500", 1500), "metrics_port": ("9187", 9187),
               "metrics_host": ("0.0.0.0", "0.0.0.0"), "timeline": ("/tmp/t-%r.json", "/tmp/t-%r.json"),
               "connect_timeout_ms": ("1234", 1234), "request_timeout_ms": ("4321", 4321),
               "dense_chunk_elems": ("1024", 1024), "part_bytes": ("65536", 65536), "wait_receive_us": ("750", 750), "io_threads": ("3", 3), "streams": ("2", 2),
               "shared_memory": ("no", False), "tolerate_worker_loss": ("yes", True), "max_message_bytes": ("1048576", 1048576),
               "scheduler_max_message_bytes": ("65536", 65536)}
    table = layerps._core.option_table()
    assert {row["field"] for row in table} == set(samples) == set(layerps.cluster.OPTION_FIELDS)
    for row in table:
        monkeypatch.setenv(row["env"], samples[row["field"]][0])
    o = layerps.Options.from_env()
    for row in table:
        assert getattr(o, row["field"]) == samples[row["field"]][1], row
    k = layerps.make_options(**{f: v for f, (_, v) in samples.items()})
    for f, (_, v) in samples.items():
        assert getattr(k, f) == v, f
    monkeypatch.setenv("LAYERPS_SHARED_MEMORY", "maybe")
    with pytest.raises(layerps.InvalidArgumentError, match="LAYERPS_SHARED_MEMORY='maybe' is not a boolean"):
        layerps.Options.from_env()
