"""Workers started by torchrun, Slurm or mpirun find their rank and the scheduler from the
launcher's environment, without LAYERPS_* (docs/launch.md)."""
import os
import re
import subprocess
import sys

import pytest

from conftest import free_ports

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    return free_ports(1)


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAYERPS_", "SLURM_", "OMPI_", "PMI_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def results(out):
    return sorted(re.findall(r"LAUNCHED (\w+) rank (\d+) of (\d+) local (\d+): x\[0\]=(\S+)", out))


def test_torchrun_workers_find_their_rank_and_the_scheduler():
    pytest.importorskip("torch.distributed.run")
    port = free_port()
    # --redirects=1 --tee=1: Debian's torch 1.13 on Python 3.11 fails on the default "0"
    # (its Std flag parsing); output still reaches the console through the tee.
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={port}",
           "--redirects=1", "--tee=1", "launched_env_worker.py"]
    p = subprocess.run(cmd, cwd=HERE, env=clean_env(LAYERPS_PORT=free_port()), capture_output=True,
                       text=True, timeout=180)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert results(p.stdout) == [("torchrun", "0", "2", "0", "3"), ("torchrun", "1", "2", "1", "3")], p.stdout


def run_tasks(envs):
    procs = [subprocess.Popen([sys.executable, "launched_env_worker.py"], cwd=HERE, env=e,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for e in envs]
    outs = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        outs.append((p.returncode, out))
    return outs


def test_slurm_and_mpirun_environments():
    port = free_port()
    slurm = [clean_env(SLURM_PROCID=r, SLURM_NTASKS=2, SLURM_LOCALID=r, SLURM_NTASKS_PER_NODE=2,
                       SLURM_JOB_NODELIST="localhost", LAYERPS_PORT=port) for r in range(2)]
    outs = run_tasks(slurm)
    assert all(rc == 0 for rc, _ in outs), outs
    assert results("".join(o for _, o in outs)) == [("slurm", "0", "2", "0", "3"), ("slurm", "1", "2", "1", "3")]
    port = free_port()
    mpi = [clean_env(OMPI_COMM_WORLD_RANK=r, OMPI_COMM_WORLD_SIZE=2, OMPI_COMM_WORLD_LOCAL_RANK=r,
                     LAYERPS_SCHEDULER_HOST="127.0.0.1", LAYERPS_PORT=port) for r in range(2)]
    outs = run_tasks(mpi)
    assert all(rc == 0 for rc, _ in outs), outs
    assert results("".join(o for _, o in outs)) == [("mpi", "0", "2", "0", "3"), ("mpi", "1", "2", "1", "3")]


def test_an_incomplete_launcher_environment_names_the_variable():
    p = subprocess.run([sys.executable, "-c", "import layerps; layerps.init()"], cwd=HERE,
                       env=clean_env(RANK=0, LOCAL_RANK=0, WORLD_SIZE=2, MASTER_PORT=1234),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "InvalidArgumentError" in p.stderr and "MASTER_ADDR is not set" in p.stderr, p.stderr


def test_srun_of_a_real_single_node_slurm(tmp_path):
    import shutil
    missing = [t for t in ("slurmctld", "slurmd", "munged", "srun") if not shutil.which(t)
               and not os.path.exists(f"/usr/sbin/{t}")]
    if missing:
        pytest.skip(f"Slurm is not installed ({', '.join(missing)}): scripts/install-deps.sh installs it")
    script = os.path.join(HERE, "..", "..", "scripts", "slurm-local.sh")
    env = clean_env(SLURMCTLD_PORT=free_port(), SLURMD_PORT=free_port(),
                    PATH=os.environ.get("PATH", "") + ":/usr/sbin")
    up = subprocess.run(["bash", script, "start", str(tmp_path)], env=env, capture_output=True, text=True,
                        timeout=60)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        env["SLURM_CONF"] = up.stdout.strip()
        p = subprocess.run(["srun", "-n", "2", f"--export=ALL,LAYERPS_PORT={free_port()}", sys.executable,
                            "launched_env_worker.py"], cwd=HERE, env=env, capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        assert results(p.stdout) == [("slurm", "0", "2", "0", "3"), ("slurm", "1", "2", "1", "3")], p.stdout
    finally:
        subprocess.run(["bash", script, "stop", str(tmp_path)], env=env, timeout=30)


def test_init_in_a_worker_pod_joins_the_scheduler_pod():
    # A pod of rank 0 (LAYERPS_ROLE=worker, or an Indexed Job's index 0) joins the job's
    # scheduler: it hosts none of its own, as under torchrun (whose bind would clash here).
    import layerps
    port = free_port()
    with layerps.Scheduler(f"tcp://127.0.0.1:{port}", num_servers=1, num_workers=2) as sched, \
            layerps.Server(sched.address, start=False) as server:
        started = server.start_async()  # complete once the workers are in
        envs = [clean_env(LAYERPS_ROLE="worker", LAYERPS_RANK=0, LAYERPS_NUM_WORKERS=2,
                          LAYERPS_SCHEDULER_HOST="127.0.0.1", LAYERPS_PORT=port),
                clean_env(JOB_COMPLETION_INDEX=1, LAYERPS_NUM_WORKERS=2,
                          LAYERPS_SCHEDULER_HOST="127.0.0.1", LAYERPS_PORT=port)]
        outs = run_tasks(envs)
        started.result(timeout=60)
        assert all(rc == 0 for rc, _ in outs), outs
        text = "".join(o for _, o in outs)
        assert "LAUNCHED role rank 0 of 2 local 0: x[0]=3" in text, outs
        assert "LAUNCHED indexed-job rank 1 of 2 local 0: x[0]=3" in text, outs
