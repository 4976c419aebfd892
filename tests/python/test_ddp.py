"""DDP on the "layerps" torch.distributed backend, and with LayerPS's communication hooks
(layerps.torch.hooks), equals DDP over gloo: the same script under torchrun, 2 ranks, 30
steps; and torch.distributed's collectives on the backend started through torch's store
(no launcher) give gloo's values (docs/python.md, "torch.distributed and DDP")."""
import json
import re
import subprocess
import sys

import pytest

from conftest import on_every_worker
from layerps.errors import InvalidArgumentError
from test_launchers import HERE, clean_env, free_port

pytest.importorskip("torch.distributed.run")


def run(comm, caps=None):
    port = free_port()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={port}",
           "--redirects=1", "--tee=1", "ddp_worker.py", comm]
    env = clean_env(LAYERPS_PORT=free_port())
    if caps:
        env["DDP_BUCKET_CAP_MB"] = caps  # one per rank: their buckets differ
    p = subprocess.run(cmd, cwd=HERE, env=env, capture_output=True, text=True, timeout=240)
    out = p.stdout + p.stderr
    ranks = sorted((json.loads(m) for m in re.findall(r"DDP (\{.*\})", out)), key=lambda r: r["rank"])
    return p.returncode, ranks, out


@pytest.fixture(scope="module")
def gloo():
    rc, ranks, out = run("gloo")
    assert rc == 0 and len(ranks) == 2, out[-4000:]
    return ranks


@pytest.mark.parametrize("comm,tol", [("backend", 1e-5), ("allreduce", 1e-5), ("ps", 1e-5), ("fp16", 2e-3)])
def test_a_hook_trains_as_ddp_over_gloo(gloo, comm, tol):
    rc, ranks, out = run(comm)
    assert rc == 0 and len(ranks) == 2, out[-4000:]
    for mine, ref in zip(ranks, gloo):
        assert mine["error"] is None, mine["error"]
        assert len(mine["losses"]) == 30
        for a, b in zip(mine["losses"], ref["losses"]):
            assert a == pytest.approx(b, rel=tol, abs=tol), (comm, mine["losses"], ref["losses"])
        assert mine["head"] == pytest.approx(ref["head"], rel=tol, abs=tol)
    # The ranks end equal, and the loss fell.
    assert ranks[0]["head"] == ranks[1]["head"]
    assert ranks[0]["losses"][-1] < 0.5 * ranks[0]["losses"][0]


class _Bucket:
    """What a hook reads of DDP's GradBucket."""

    def __init__(self, index, values):
        self._index, self._values = index, values

    def index(self):
        return self._index

    def buffer(self):
        return self._values


def test_ps_hook_names_a_rank_whose_buckets_differ(cluster):
    import torch

    from layerps.torch import hooks

    def step(r, w):
        state = hooks.PSHookState(worker=w, name="differ")
        hooks.ps_hook(state, _Bucket(0, torch.ones(10 + r)))

    errors = on_every_worker(cluster.workers, step)
    for r in (0, 1):
        e = errors.get(r)
        assert isinstance(e, InvalidArgumentError), errors
        assert f"ps_hook: DDP bucket 0 holds {10 + r} values on rank {r} but {11 - r} on rank {1 - r}" in str(e), e


def test_backend_collectives_through_the_store_without_a_launcher():
    port = free_port()
    env = clean_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    procs = [subprocess.Popen([sys.executable, "backend_worker.py", str(r), "3"], cwd=HERE, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(3)]
    outs = [p.communicate(timeout=180)[0] for p in procs]
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, out[-4000:]
        assert f"BACKEND rank {r} ok" in out, out[-4000:]
