"""Scheduler, Server, Worker and tables: the Python face of the public C++ API, and the
ways a process forms or joins a cluster.

The node classes live in layerps/_nodes.py and are re-exported here under their public
name; this module holds what concerns the whole process: LocalCluster (every node in this
process), init()/default_worker()/shutdown() (this process's worker under layerps-launch,
torchrun, Slurm or mpirun: the one default worker, which layerps.torch, layerps.collectives
and layerps.algorithms use when no worker= is given), launcher(), and the bundled daemons'
paths (bin_dir, tool_path).

Every method that can block (start, join, barrier, declare, wait) releases the GIL while
it blocks, so other Python threads (for instance the other nodes of an in-process
cluster) keep running.
"""

import os
import shutil
import uuid

from . import _core
from ._arrays import as_input, as_keys, as_output, is_tensor  # noqa: F401 (names this module always had)
from ._nodes import (  # noqa: F401
    OPTION_FIELDS, Handle, Options, Scheduler, Server, Table, Worker, make_options,
)
from .errors import FailedPreconditionError, InvalidArgumentError

__all__ = [
    "Options", "make_options", "Handle", "Table", "Scheduler", "Server", "Worker",
    "LocalCluster", "bin_dir", "tool_path", "init", "shutdown", "default_worker",
]


def bin_dir():
    """The folder holding layerps-scheduler, layerps-server and layerps-launch: the
    package's own ``bin/`` (LAYERPS_BIN_DIR overrides it)."""
    env = os.environ.get("LAYERPS_BIN_DIR")
    if env:
        return env
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin")


def tool_path(name):
    """The path of a bundled tool (``layerps-server``...), or of the one on PATH."""
    p = os.path.join(bin_dir(), name)
    if os.access(p, os.X_OK):
        return p
    found = shutil.which(name)
    if found:
        return found
    raise FailedPreconditionError(f"{name} is not installed beside the layerps package ({p})")


class LocalCluster:
    """A whole cluster in this process (scheduler, servers and workers as objects whose
    blocking calls run in threads): for notebooks and tests.

        with layerps.LocalCluster(num_servers=2, num_workers=2) as c:
            w0, w1 = c.workers
    """

    def __init__(self, num_servers=1, num_workers=1, *, transport="inproc", **fields):
        if transport == "inproc":
            address = f"inproc://layerps-{uuid.uuid4().hex[:12]}"
        elif transport == "tcp":
            address = "tcp://127.0.0.1:0"
        elif transport == "ipc":
            address = f"ipc:///tmp/layerps-{uuid.uuid4().hex[:12]}"
        else:
            raise InvalidArgumentError(f"transport must be 'inproc', 'tcp' or 'ipc', not {transport!r}")
        self.scheduler = Scheduler(address, num_servers, num_workers, **fields)
        addr = self.scheduler.address
        node_fields = {k: v for k, v in fields.items() if k not in ("num_servers", "num_workers")}
        self.servers = [Server(addr, start=False, **node_fields) for _ in range(num_servers)]
        self.workers = [Worker(addr, start=False, **node_fields) for _ in range(num_workers)]
        futures = [n.start_async() for n in self.servers + self.workers]
        try:
            for f in futures:
                f.result()
        except BaseException:
            self.close()
            raise
        self.workers.sort(key=lambda w: w.rank)

    def close(self):
        for w in getattr(self, "workers", []):
            w.stop()
        for s in getattr(self, "servers", []):
            s.stop()
        self.scheduler.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


_default_worker = None


_hosted = []  # the scheduler and servers this process hosts for torchrun/Slurm/mpirun jobs
_hosted_starts = []  # their servers' starts in flight


def launcher():
    """The launcher that started this process, as its environment says: None, or a dict
    with ``launcher`` ("torchrun", "slurm", "mpi"), ``rank``, ``size``, ``local_rank``,
    ``local_size``, ``scheduler_address``. InvalidArgumentError names a missing variable
    when a launcher's environment is incomplete (docs/launch.md)."""
    return _core.detect_launcher()


def init(**fields):
    """Starts this process's worker and makes it the default for layerps.torch. Returns
    the Worker.

    Under layerps-launch (LAYERPS_SCHEDULER set) it joins that cluster. Under torchrun,
    Slurm's srun or mpirun (no LAYERPS_SCHEDULER) every task is a worker with the
    launcher's rank, and the task of rank 0 also hosts the scheduler (bound to every
    interface on LAYERPS_PORT, default MASTER_PORT + 1 or 29501) and LAYERPS_NUM_SERVERS
    servers (default 1) in this process; shutdown() stops them once every worker left. In
    a Kubernetes pod (LAYERPS_ROLE=worker, an Indexed Job, a PyTorchJob) it joins the
    scheduler of the job's scheduler pod."""
    global _default_worker
    if _default_worker is not None:
        raise FailedPreconditionError("layerps.init() was already called")
    env = None
    if "LAYERPS_SCHEDULER" not in os.environ and "scheduler_address" not in fields:
        env = launcher()
        if env is None:
            raise FailedPreconditionError(
                "layerps.init(): LAYERPS_SCHEDULER is not set; run the program under "
                "`python -m layerps.launch -s M -w N -- ...` (or torchrun, srun, mpirun), "
                "or pass scheduler_address=")
    # torchrun, srun and mpirun start only workers: the first hosts the scheduler and the
    # servers, and so does a PyTorchJob's Master when no LAYERPS_SCHEDULER_HOST names a
    # scheduler pod. Other Kubernetes pods (LAYERPS_ROLE=worker, an Indexed Job) join the
    # scheduler that runs in a pod of its own (docs/kubernetes.md).
    hosts = env is not None and env["rank"] == 0 and (
        env["launcher"] in ("torchrun", "slurm", "mpi") or
        (env["launcher"] == "pytorchjob" and not os.environ.get("LAYERPS_SCHEDULER_HOST")))
    if hosts:
        host_cluster("127.0.0.1", env["scheduler_port"], env["size"],
                     int(os.environ.get("LAYERPS_NUM_SERVERS", "1")), **fields)
    _default_worker = Worker.from_env(**fields)
    for f in _hosted_starts:
        f.result()
    _hosted_starts.clear()
    return _default_worker


def host_cluster(host, port, workers, servers, **fields):
    """Starts a scheduler (bound to every interface on ``port``, 0: any free one) and
    ``servers`` servers in this process for a job of ``workers`` workers; shutdown() stops
    them once every worker left. Returns the scheduler's address as the workers reach it
    (``host`` and the bound port). The servers finish starting in init()."""
    node_fields = {k: v for k, v in fields.items()
                   if k not in ("num_servers", "num_workers", "rank", "scheduler_address")}
    sched = Scheduler(f"tcp://0.0.0.0:{int(port)}", servers, workers, **node_fields)
    _hosted.append(sched)
    bound = int(sched.address.rsplit(":", 1)[1])
    for _ in range(servers):
        s = Server(f"tcp://127.0.0.1:{bound}", start=False, **node_fields)
        _hosted.append(s)
        _hosted_starts.append(s.start_async())
    return f"tcp://{host}:{bound}"


def default_worker():
    """The worker started by layerps.init()."""
    if _default_worker is None:
        raise FailedPreconditionError("no default worker: call layerps.init() first, or pass worker=")
    return _default_worker


def _current_worker():
    """The worker started by layerps.init(), or None (layerps.torch.init and
    is_initialized read the state through this, so that it lives here only)."""
    return _default_worker


def shutdown(timeout=60):
    """Stops the default worker (the cluster ends when every worker stopped). A process
    that hosts the scheduler and servers (init() under torchrun, Slurm or mpirun, rank 0)
    then waits up to ``timeout`` seconds for the other workers to leave and stops them."""
    global _default_worker
    if _default_worker is not None:
        _default_worker.stop()
        _default_worker = None
    if _hosted:
        try:
            _hosted[0].join(timeout)
        finally:
            for n in reversed(_hosted):
                n.stop()
            _hosted.clear()
