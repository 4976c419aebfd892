"""deploy/kubernetes/ run as pods on this machine (docs/kubernetes.md): deploy/run_pods.py
reads each manifest's containers with a YAML parser (command, args, environment,
workingDir, volumes, probes) and starts exactly those, each pod in a network namespace of
its own with its own IP, the Services' names in its /etc/hosts, and the variables
Kubernetes' controllers add (an Indexed Job's JOB_COMPLETION_INDEX, a PyTorchJob's RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Without the image: the programs are this checkout's
build outputs (the venv's daemons and python, where the image has /opt/layerps/bin), since
building the image takes many minutes (deploy/build-image.sh). With LAYERPS_TEST_IMAGE=IMAGE
the same pods also run from that image under podman. Needs root (network namespaces):
skipped with the reason otherwise."""
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile

import pytest

yaml = pytest.importorskip("yaml", reason="python3-yaml is not installed (scripts/install-deps.sh)")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
K8S = os.path.join(ROOT, "deploy", "kubernetes")
sys.path.insert(0, os.path.join(ROOT, "deploy"))
import run_pods  # noqa: E402

BIN = os.path.dirname(sys.executable)  # the venv's python3, layerps-scheduler, layerps-server


def netns_reason():
    """Why pods cannot run in network namespaces here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "unshare", "mount"):
        if not shutil.which(tool):
            return f"{tool} is not installed"
    for tool in ("layerps-scheduler", "layerps-server", "python3"):
        if not os.path.exists(os.path.join(BIN, tool)):
            return f"{tool} is not in {BIN} (scripts/python-build.sh installs the package there)"
    name = f"lpsprobe{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if r.returncode != 0:
        return f"cannot make a network namespace: {r.stderr.strip()}"
    try:
        r = subprocess.run(["ip", "-n", name, "link", "add", "probe0", "type", "veth", "peer", "name", "probe1"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return f"cannot make a veth pair: {r.stderr.strip()}"
    finally:
        subprocess.run(["ip", "netns", "delete", name], capture_output=True)
    return None


REASON = netns_reason()
needs_netns = pytest.mark.skipif(REASON is not None, reason=f"pods cannot run here: {REASON}")


def manifests(*names):
    return run_pods.load([os.path.join(K8S, n) for n in names])


def run(docs, image=None, timeout=120):
    with tempfile.TemporaryDirectory(prefix="layerps-pods.") as workdir:
        backend = run_pods.Podman(image, workdir) if image else run_pods.Netns(BIN, workdir)
        try:
            pods = run_pods.run(docs, backend, {"layerps-token": {"token": secrets.token_hex(16)}}, timeout)
        finally:
            backend.close()
        return {p["pod"]: p for p in run_pods.summary(pods)}


def check_job(pods, launcher, workers):
    report = "\n".join(f"{n}: exit {p['exit_codes']} ready {p['ready_s']}\n{p['log'][-1500:]}"
                       for n, p in pods.items())
    for name, p in pods.items():
        assert p["exit_codes"] == [0], report
        if p["kind"] in ("Deployment", "StatefulSet"):
            # The readiness probe (/metrics) passed while it ran. The liveness probe (the same
            # /metrics) follows at once and must not fail; but the job can end, and the
            # scheduler and servers with it, before it runs (None): whether it ran is a race
            # between two timers, not a verdict.
            assert p["ready_s"] is not None and p["live_ok"] is not False, report
    lines = sorted(line for p in pods.values() for line in p["log"].splitlines() if line.startswith("LAYERPS-POD"))
    assert len(lines) == len(workers), report
    for rank, (line, pod) in enumerate(zip(lines, workers)):
        assert line.startswith(f"LAYERPS-POD {launcher} rank {rank} of 2 workers, 2 servers: "), report
        assert line.split(": ")[-1].startswith("ok"), report
        assert pod in pods, report


def test_the_manifests_agree_with_each_other():
    """The numbers in job-config.yaml are those of the workloads; every probe is on the
    metrics port, served on every interface; each pod says its role or is recognized."""
    docs = manifests("job-config.yaml", "scheduler.yaml", "servers.yaml", "workers-indexed-job.yaml",
                     "workers-pytorchjob.yaml")
    job = run_pods.objects(docs, "ConfigMap")["layerps-job"]["data"]
    by_kind = {d["kind"]: d for d in docs}
    assert by_kind["StatefulSet"]["spec"]["replicas"] == int(job["LAYERPS_NUM_SERVERS"])
    assert by_kind["Job"]["spec"]["completions"] == by_kind["Job"]["spec"]["parallelism"] == \
        int(job["LAYERPS_NUM_WORKERS"])
    assert by_kind["Job"]["spec"]["completionMode"] == "Indexed"
    replicas = by_kind["PyTorchJob"]["spec"]["pytorchReplicaSpecs"]
    assert sum(r["replicas"] for r in replicas.values()) == int(job["LAYERPS_NUM_WORKERS"])
    services = run_pods.objects(docs, "Service")
    assert job["LAYERPS_SCHEDULER_HOST"] in services
    assert any(p["port"] == int(job["LAYERPS_PORT"]) for p in services[job["LAYERPS_SCHEDULER_HOST"]]["spec"]["ports"])
    for pod in run_pods.pods_of(docs):
        for c in pod.spec["containers"]:
            env = {e["name"]: e.get("value") for e in c["env"]}
            assert env["LAYERPS_METRICS_HOST"] == "0.0.0.0", pod.name
            for probe in ("readinessProbe", "livenessProbe"):
                if probe in c:
                    assert c[probe]["httpGet"] == {"path": "/metrics", "port": int(env["LAYERPS_METRICS_PORT"])}
            assert "livenessProbe" in c, pod.name
            if pod.kind in ("Deployment", "StatefulSet"):
                assert "readinessProbe" in c, pod.name
            assert "LAYERPS_ROLE" in env or pod.kind == "PyTorchJob", pod.name


@needs_netns
def test_scheduler_servers_and_an_indexed_job_of_workers():
    pods = run(manifests("job-config.yaml", "scheduler.yaml", "servers.yaml", "workers-indexed-job.yaml"))
    assert sorted(pods) == ["layerps-scheduler-0", "layerps-server-0", "layerps-server-1",
                            "layerps-workers-0", "layerps-workers-1"]
    check_job(pods, "indexed-job", ["layerps-workers-0", "layerps-workers-1"])


@needs_netns
def test_scheduler_servers_and_a_pytorchjob_of_workers():
    pods = run(manifests("job-config.yaml", "scheduler.yaml", "servers.yaml", "workers-pytorchjob.yaml"))
    check_job(pods, "pytorchjob", ["layerps-train-master-0", "layerps-train-worker-0"])


@needs_netns
def test_a_pod_whose_index_or_role_is_wrong_is_named():
    # A Job of 3 while the job has 2 workers: pod 2 fails at once, naming its rank and the
    # variables; the job of pods 0 and 1 ends as it should.
    docs = manifests("job-config.yaml", "scheduler.yaml", "servers.yaml", "workers-indexed-job.yaml")
    job = next(d for d in docs if d["kind"] == "Job")
    job["spec"]["completions"] = job["spec"]["parallelism"] = 3
    pods = run(docs)
    bad = pods.pop("layerps-workers-2")
    assert bad["exit_codes"] != [0]
    assert "rank 2 (JOB_COMPLETION_INDEX) is not below the number of workers 2 (LAYERPS_NUM_WORKERS)" in bad["log"], \
        bad["log"]
    check_job(pods, "indexed-job", ["layerps-workers-0", "layerps-workers-1"])

    # An unknown role: the scheduler's pod ends at once, naming the variable.
    docs = manifests("job-config.yaml", "scheduler.yaml")
    dep = next(d for d in docs if d["kind"] == "Deployment")
    c = dep["spec"]["template"]["spec"]["containers"][0]
    c["env"] = [{"name": "LAYERPS_ROLE", "value": "master"} if e["name"] == "LAYERPS_ROLE" else e for e in c["env"]]
    pods = run(docs, timeout=30)
    sched = pods["layerps-scheduler-0"]
    assert sched["exit_codes"] != [0] and sched["ready_s"] is None
    assert re.search(r"LAYERPS_ROLE='master' is not a role: scheduler, server or worker", sched["log"]), sched["log"]


@pytest.mark.skipif(not os.environ.get("LAYERPS_TEST_IMAGE"),
                    reason="LAYERPS_TEST_IMAGE is not set: the image takes minutes to build "
                           "(deploy/build-image.sh), so its pods run only when one is named")
def test_the_pods_from_the_image_under_podman():
    image = os.environ["LAYERPS_TEST_IMAGE"]
    if os.geteuid() != 0 or not shutil.which("podman"):
        pytest.skip("podman (as root) is not installed")
    r = subprocess.run(["podman", "image", "exists", image])
    if r.returncode != 0:
        pytest.skip(f"no image {image}: deploy/build-image.sh builds it")
    pods = run(manifests("job-config.yaml", "scheduler.yaml", "servers.yaml", "workers-indexed-job.yaml"),
               image=image, timeout=180)
    check_job(pods, "indexed-job", ["layerps-workers-0", "layerps-workers-1"])
