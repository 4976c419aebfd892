#!/usr/bin/python3
"""Runs the pods of Kubernetes manifests on this machine, as Kubernetes would start them,
without Kubernetes: each manifest's containers are read with a YAML parser, and exactly
their command, arguments, environment and working directory are started, so that the
manifests cannot drift from what runs (docs/kubernetes.md, "Running the manifests here").

    /usr/bin/python3 deploy/run_pods.py --podman layerps:latest deploy/kubernetes/{job-config,scheduler,servers,workers-indexed-job}.yaml
    /usr/bin/python3 deploy/run_pods.py --netns --bin-dir .venv/bin deploy/kubernetes/...

What Kubernetes would do, done here:
- Deployment, StatefulSet, Job (Indexed or not) and Kubeflow PyTorchJob give their pods:
  a Deployment's replicas, a StatefulSet's `NAME-i` (label apps.kubernetes.io/pod-index=i),
  an Indexed Job's pod i (annotation batch.kubernetes.io/job-completion-index=i and the
  variable JOB_COMPLETION_INDEX=i, as the Job controller sets them), a PyTorchJob's
  `NAME-master-0` and `NAME-worker-i` with the training-operator's RANK, WORLD_SIZE,
  MASTER_ADDR (the master's Service), MASTER_PORT (23456) and PYTHONUNBUFFERED.
- The environment: envFrom ConfigMaps, then env (value with $(VAR) references, valueFrom
  fieldRef status.podIP / metadata.name / metadata.namespace / metadata.labels['k'] /
  metadata.annotations['k'], configMapKeyRef, secretKeyRef from --secret), HOSTNAME, and
  the Service links (NAME_SERVICE_HOST, ...) unless enableServiceLinks is false.
- Names: every pod's name, `POD.SUBDOMAIN` for a StatefulSet's, and each Service's name
  (its first ready pod; a headless Service: each pod) resolve through /etc/hosts.
- configMap and emptyDir volumes are directories of their files at their mountPath.
- httpGet readiness and liveness probes are polled; a pod's start time is from its start
  to its first passing readiness probe (or, with none, its first passing liveness probe).
Not done: restarts (a Deployment's or StatefulSet's container that exits is reported, not
restarted), resources, other kinds of volume and probe.

Two ways to run a pod:
- --podman IMAGE: `podman pod create` (its own IP on a podman network made for the run,
  its hostname, the /etc/hosts entries) and `podman run --pod` of the container from the
  image, its `command` as the entrypoint and `args` after it (the volumes mounted).
- --netns: no image; the host's build outputs (--bin-dir first on PATH, as the image's
  /opt/layerps/bin) in a network namespace per pod, on a bridge in a namespace of its own
  (the host's network is not touched), with a mount namespace whose /etc/hosts is the
  run's. A volume's directory stands at its mountPath only as the working directory (a
  container whose workingDir is the mountPath runs in it); other mountPaths are refused.
Both need root. Prints one line per pod, and a JSON summary with --json.
"""
import argparse
import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import yaml

PYTORCHJOB_PORT = 23456  # the training-operator's default MASTER_PORT
NETNS_ENV = {"LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1", "HOME": "/root"}  # the image's ENV
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class ManifestError(Exception):
    pass


# --- Manifests to pods ---------------------------------------------------------------------

class Pod:
    def __init__(self, name, kind, owner, spec, labels, annotations, extra_env, completes):
        self.name = name
        self.kind = kind            # the workload's kind: Deployment, StatefulSet, Job, PyTorchJob
        self.owner = owner          # the workload's name
        self.spec = spec            # the pod template's spec
        self.labels = labels
        self.annotations = annotations
        self.extra_env = extra_env  # what a controller adds (JOB_COMPLETION_INDEX, RANK, ...)
        self.completes = completes  # runs to completion (Job, PyTorchJob) or keeps running
        self.subdomain = spec.get("subdomain")
        self.ip = None
        self.procs = []             # one per container
        self.logs = []
        self.started = None
        self.ready_s = None
        self.live_ok = None
        self.exit_codes = []


def load(paths):
    docs = []
    for p in paths:
        with open(p) as f:
            docs += [d for d in yaml.safe_load_all(f) if d]
    return docs


def pods_of(docs):
    """The pods the workloads among `docs` make, in order."""
    pods = []
    for d in docs:
        kind, meta = d.get("kind"), d.get("metadata", {})
        name = meta["name"]
        spec = d.get("spec", {})
        if kind in ("Deployment", "StatefulSet", "Job"):
            tmpl = spec["template"]
            tmeta, tspec = tmpl.get("metadata", {}), tmpl["spec"]
            if kind == "Deployment":
                n = spec.get("replicas", 1)
                for i in range(n):
                    pods.append(Pod(f"{name}-{i}", kind, name, tspec, dict(tmeta.get("labels", {})),
                                    dict(tmeta.get("annotations", {})), [], False))
            elif kind == "StatefulSet":
                for i in range(spec.get("replicas", 1)):
                    p = Pod(f"{name}-{i}", kind, name, tspec,
                            {**tmeta.get("labels", {}), "apps.kubernetes.io/pod-index": str(i),
                             "statefulset.kubernetes.io/pod-name": f"{name}-{i}"},
                            dict(tmeta.get("annotations", {})), [], False)
                    p.subdomain = spec.get("serviceName")
                    pods.append(p)
            else:
                indexed = spec.get("completionMode") == "Indexed"
                n = spec.get("completions", 1) if indexed else spec.get("parallelism", 1)
                for i in range(n):
                    ann = dict(tmeta.get("annotations", {}))
                    labels = dict(tmeta.get("labels", {}))
                    extra = []
                    if indexed:
                        ann["batch.kubernetes.io/job-completion-index"] = str(i)
                        labels["batch.kubernetes.io/job-completion-index"] = str(i)
                        extra = [{"name": "JOB_COMPLETION_INDEX", "value": str(i)}]
                    pods.append(Pod(f"{name}-{i}", kind, name, tspec, labels, ann, extra, True))
        elif kind == "PyTorchJob":
            replicas = spec["pytorchReplicaSpecs"]
            order = [t for t in ("Master", "Worker") if t in replicas]
            world = sum(replicas[t].get("replicas", 1) for t in order)
            master = f"{name}-master-0"
            rank = 0
            for t in order:
                r = replicas[t]
                tmpl = r["template"]
                tmeta = tmpl.get("metadata", {})
                for i in range(r.get("replicas", 1)):
                    port = PYTORCHJOB_PORT
                    for c in tmpl["spec"]["containers"]:
                        for cp in c.get("ports", []):
                            if cp.get("name") == "pytorchjob-port":
                                port = cp["containerPort"]
                    extra = [{"name": "MASTER_PORT", "value": str(port)},
                             {"name": "MASTER_ADDR", "value": master},
                             {"name": "WORLD_SIZE", "value": str(world)},
                             {"name": "RANK", "value": str(rank)},
                             {"name": "PYTHONUNBUFFERED", "value": "0"}]
                    labels = {**tmeta.get("labels", {}), "training.kubeflow.org/job-name": name,
                              "training.kubeflow.org/replica-type": t.lower(),
                              "training.kubeflow.org/replica-index": str(i)}
                    pods.append(Pod(f"{name}-{t.lower()}-{i}", kind, name, tmpl["spec"], labels,
                                    dict(tmeta.get("annotations", {})), extra, True))
                    rank += 1
        elif kind in ("ConfigMap", "Secret", "Service", "Kustomization"):
            continue
        else:
            raise ManifestError(f"{kind} {name}: not a kind this runner starts")
    return pods


def objects(docs, kind):
    return {d["metadata"]["name"]: d for d in docs if d.get("kind") == kind}


def services_of(docs, pods):
    """name -> the IPs of the pods its selector picks (and the PyTorchJob masters' Services)."""
    out = {}
    for name, s in objects(docs, "Service").items():
        sel = s.get("spec", {}).get("selector", {})
        out[name] = ([p.ip for p in pods if sel and all(p.labels.get(k) == v for k, v in sel.items())],
                     s.get("spec", {}).get("clusterIP") == "None", s)
    for p in pods:
        if p.kind == "PyTorchJob" and p.name.endswith("-master-0"):
            out[p.name] = ([p.ip], True, None)
    return out


def hosts_file(pods, services):
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    for p in pods:
        names = [p.name] + ([f"{p.name}.{p.subdomain}"] if p.subdomain else [])
        lines.append(f"{p.ip}\t" + " ".join(names))
    for name, (ips, _headless, _svc) in services.items():
        for ip in ips[:1] if ips else []:
            lines.append(f"{ip}\t{name}")
    return "\n".join(lines) + "\n"


def field_ref(pod, path):
    m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if m:
        d = pod.labels if m.group(1) == "labels" else pod.annotations
        if m.group(2) not in d:
            raise ManifestError(f"pod {pod.name}: fieldRef {path}: no such {m.group(1)[:-1]}")
        return d[m.group(2)]
    simple = {"status.podIP": pod.ip, "metadata.name": pod.name, "metadata.namespace": "default",
              "status.hostIP": pod.ip, "spec.nodeName": "localhost",
              "spec.serviceAccountName": "default"}
    if path not in simple:
        raise ManifestError(f"pod {pod.name}: fieldRef {path} is not one this runner knows")
    return simple[path]


def expand(value, env):
    """Kubernetes' $(VAR) references to variables defined before; $$ escapes."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), value)


def container_env(pod, c, docs, secrets, services):
    cms = objects(docs, "ConfigMap")
    sec = {n: {**s.get("stringData", {})} for n, s in objects(docs, "Secret").items()}
    for n, kv in secrets.items():
        sec.setdefault(n, {}).update(kv)
    env = {"HOSTNAME": pod.name}
    if pod.spec.get("enableServiceLinks", True):
        for name, (ips, headless, svc) in services.items():
            if headless or not ips or svc is None:
                continue
            key = name.upper().replace("-", "_")
            ports = svc["spec"].get("ports", [])
            env[f"{key}_SERVICE_HOST"] = ips[0]
            if ports:
                env[f"{key}_SERVICE_PORT"] = str(ports[0]["port"])
                env[f"{key}_PORT"] = f"tcp://{ips[0]}:{ports[0]['port']}"
            for sp in ports:
                if "name" in sp:
                    env[f"{key}_SERVICE_PORT_{sp['name'].upper().replace('-', '_')}"] = str(sp["port"])
                pre = f"{key}_PORT_{sp['port']}_TCP"
                env.update({pre: f"tcp://{ips[0]}:{sp['port']}", f"{pre}_PROTO": "tcp",
                            f"{pre}_PORT": str(sp["port"]), f"{pre}_ADDR": ips[0]})
    for ef in c.get("envFrom", []):
        prefix = ef.get("prefix", "")
        if "configMapRef" in ef:
            ref = ef["configMapRef"]
            if ref["name"] not in cms:
                if ref.get("optional"):
                    continue
                raise ManifestError(f"pod {pod.name}: envFrom ConfigMap {ref['name']} is not in the manifests")
            env.update({prefix + k: str(v) for k, v in cms[ref["name"]].get("data", {}).items()})
        elif "secretRef" in ef:
            ref = ef["secretRef"]
            if ref["name"] not in sec:
                if ref.get("optional"):
                    continue
                raise ManifestError(f"pod {pod.name}: envFrom Secret {ref['name']} is not given")
            env.update({prefix + k: v for k, v in sec[ref["name"]].items()})
    for e in list(c.get("env", [])) + pod.extra_env:
        name = e["name"]
        if "value" in e:
            env[name] = expand(str(e["value"]), env)
        elif "valueFrom" in e:
            vf = e["valueFrom"]
            if "fieldRef" in vf:
                env[name] = field_ref(pod, vf["fieldRef"]["fieldPath"])
            elif "configMapKeyRef" in vf or "secretKeyRef" in vf:
                is_cm = "configMapKeyRef" in vf
                ref = vf["configMapKeyRef" if is_cm else "secretKeyRef"]
                data = (cms.get(ref["name"], {}).get("data", {}) if is_cm else sec.get(ref["name"], {}))
                if ref["key"] in data:
                    env[name] = str(data[ref["key"]])
                elif not ref.get("optional"):
                    raise ManifestError(f"pod {pod.name}: {name} from {ref['name']}/{ref['key']}: not given")
            else:
                raise ManifestError(f"pod {pod.name}: {name}: valueFrom {list(vf)} is not one this runner knows")
        else:
            env[name] = ""
    return env


def volume_dirs(pod, docs, workdir):
    """volume name -> a directory with its files."""
    cms = objects(docs, "ConfigMap")
    out = {}
    for v in pod.spec.get("volumes", []):
        d = os.path.join(workdir, f"{pod.name}.{v['name']}")
        os.makedirs(d)
        if "configMap" in v:
            cm = cms.get(v["configMap"]["name"])
            if cm is None:
                raise ManifestError(f"pod {pod.name}: volume {v['name']}: ConfigMap "
                                    f"{v['configMap']['name']} is not in the manifests")
            items = v["configMap"].get("items")
            data = cm.get("data", {})
            for k, path in ([(i["key"], i["path"]) for i in items] if items else [(k, k) for k in data]):
                with open(os.path.join(d, path), "w") as f:
                    f.write(data[k])
        elif "emptyDir" not in v:
            raise ManifestError(f"pod {pod.name}: volume {v['name']}: only configMap and emptyDir volumes run here")
        out[v["name"]] = d
    return out


def http_probe(ip, probe, timeout=None):
    h = probe["httpGet"]
    port = h["port"]
    url = f"http://{ip}:{port}{h.get('path', '/')}"
    try:
        with urllib.request.urlopen(url, timeout=timeout or probe.get("timeoutSeconds", 1)) as r:
            return 200 <= r.status < 400
    except Exception:  # noqa: BLE001 (any failure is a failed probe)
        return False


# --- Backends --------------------------------------------------------------------------------

class Netns:
    """Each pod in a network namespace, on a bridge in a namespace of its own."""

    def __init__(self, bin_dir, workdir):
        for tool in ("ip", "unshare", "mount"):
            if not shutil.which(tool):
                raise RuntimeError(f"{tool} is not installed")
        if os.geteuid() != 0:
            raise RuntimeError("network namespaces need root")
        self.bin_dir = os.path.abspath(bin_dir)
        self.workdir = workdir
        self.prefix = f"lps{os.getpid() % 100000}"
        self.bridge = f"{self.prefix}b"
        self.spaces = []
        self.n = 0
        self.ip_cmd = shutil.which("ip")
        self._sh(["netns", "add", self.bridge])
        self.spaces.append(self.bridge)
        self._sh(["-n", self.bridge, "link", "add", "br0", "type", "bridge"])
        self._sh(["-n", self.bridge, "addr", "add", "10.244.0.1/24", "dev", "br0"])
        self._sh(["-n", self.bridge, "link", "set", "br0", "up"])
        self._sh(["-n", self.bridge, "link", "set", "lo", "up"])

    def _sh(self, args):
        r = subprocess.run([self.ip_cmd] + args, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")

    def create(self, pod):
        self.n += 1
        ns = f"{self.prefix}p{self.n}"
        self._sh(["netns", "add", ns])
        self.spaces.append(ns)
        veth = f"{self.prefix}v{self.n}"
        self._sh(["-n", self.bridge, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns])
        self._sh(["-n", self.bridge, "link", "set", veth, "master", "br0", "up"])
        pod.ip = f"10.244.0.{10 + self.n}"
        self._sh(["-n", ns, "addr", "add", f"{pod.ip}/24", "dev", "eth0"])
        self._sh(["-n", ns, "link", "set", "eth0", "up"])
        self._sh(["-n", ns, "link", "set", "lo", "up"])
        pod.netns = ns

    def start(self, pod, c, env, hosts, vols, log):
        cmd = list(c.get("command", [])) + list(c.get("args", []))
        if not c.get("command"):
            raise ManifestError(f"pod {pod.name}: no command: --netns runs no image, so it needs the command")
        cmd = [expand(a, env) for a in cmd]
        cwd = c.get("workingDir") or self.workdir
        mounts = {m["mountPath"]: vols[m["name"]] for m in c.get("volumeMounts", [])}
        for path, d in mounts.items():
            if path != c.get("workingDir"):
                raise ManifestError(f"pod {pod.name}: volume at {path}: --netns stands a volume only at the "
                                    "workingDir (run --podman for others)")
        cwd = mounts.get(cwd, cwd)
        full_env = {**NETNS_ENV, "PATH": f"{self.bin_dir}:{SYSTEM_PATH}", **env}
        # A mount namespace whose /etc/hosts is the run's, and the pod's hostname (UTS).
        wrapper = 'mount --bind "$1" /etc/hosts && hostname "$2" && shift 2 && exec "$@"'
        argv = [self.ip_cmd, "netns", "exec", pod.netns, "unshare", "--mount", "--uts",
                "--propagation", "private", "sh", "-c", wrapper, "pod", hosts, pod.name] + cmd
        return subprocess.Popen(argv, env=full_env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)

    def probe(self, pod, probe, timeout=None):
        # The bridge's namespace reaches every pod: probe from a thread that entered it.
        result = []

        def run():
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            fd = os.open(f"/run/netns/{self.bridge}", os.O_RDONLY)
            try:
                if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
                    result.append(False)
                    return
            finally:
                os.close(fd)
            result.append(http_probe(pod.ip, probe, timeout))

        t = threading.Thread(target=run)
        t.start()
        t.join()
        return result[0]

    def stop(self, pod):
        for p in pod.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, 15)
                except ProcessLookupError:
                    pass

    def close(self):
        for ns in reversed(self.spaces):
            subprocess.run([self.ip_cmd, "netns", "delete", ns], capture_output=True)


class Podman:
    """Each pod a podman pod on a podman network made for the run."""

    def __init__(self, image, workdir):
        if not shutil.which("podman"):
            raise RuntimeError("podman is not installed")
        self.image = image
        self.workdir = workdir
        here = os.path.dirname(os.path.abspath(__file__))
        r = subprocess.run(["bash", os.path.join(here, "podman-flags.sh"), image],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(r.stderr.strip())
        flags = r.stdout.split()
        self.env = dict(os.environ)
        if flags:
            # The same settings as a containers.conf, so that `podman pod create` (its infra
            # container) gets them too.
            conf = os.path.join(workdir, "containers.conf")
            ulimits = [flags[i + 1] for i, f in enumerate(flags) if f == "--ulimit"]
            runtime = [flags[i + 1] for i, f in enumerate(flags) if f == "--runtime"]
            with open(conf, "w") as f:
                f.write("[containers]\n")
                if ulimits:
                    f.write("default_ulimits = [" + ", ".join(f'"{u}"' for u in ulimits) + "]\n")
                if runtime:
                    f.write(f'[engine]\nruntime = "{runtime[0]}"\n')
            self.env["CONTAINERS_CONF"] = conf
        self.prefix = f"lps{os.getpid() % 100000}"
        self.net = f"{self.prefix}net"
        self.subnet = f"10.{246 + os.getpid() % 8}.{os.getpid() % 250}"
        self.n = 0
        self.pods = []
        self._podman(["network", "create", "--subnet", f"{self.subnet}.0/24", self.net])

    def _podman(self, args, check=True):
        r = subprocess.run(["podman"] + args, capture_output=True, text=True, env=self.env)
        if check and r.returncode != 0:
            raise RuntimeError(f"podman {' '.join(args[:3])}...: {r.stderr.strip()[-2000:]}")
        return r

    def create(self, pod):
        self.n += 1
        pod.ip = f"{self.subnet}.{10 + self.n}"

    def start(self, pod, c, env, hosts, vols, log):
        if pod.name not in self.pods:
            add = []
            with open(hosts) as f:
                lines = f.read().splitlines()
            for line in lines:
                ip, *names = line.split()
                if ip.startswith("127.") or ip == "::1":
                    continue
                add += [a for n in names for a in ("--add-host", f"{n}:{ip}")]
            self._podman(["pod", "create", "--name", f"{self.prefix}-{pod.name}", "--network", self.net,
                          "--ip", pod.ip, "--hostname", pod.name] + add)
            self.pods.append(pod.name)
        args = ["run", "--pod", f"{self.prefix}-{pod.name}", "--name", f"{self.prefix}-{pod.name}-{c['name']}"]
        for k, v in env.items():
            args += ["--env", f"{k}={v}"]
        if c.get("workingDir"):
            args += ["--workdir", c["workingDir"]]
        for m in c.get("volumeMounts", []):
            args += ["--volume", f"{vols[m['name']]}:{m['mountPath']}" + (":ro" if m.get("readOnly") else "")]
        cmd = [expand(a, env) for a in c.get("command", [])]
        if cmd:
            args += ["--entrypoint", json.dumps(cmd)]
        args += [self.image]  # the manifests' image, as built here (--podman IMAGE)
        args += [expand(a, env) for a in c.get("args", [])]
        # In the foreground (podman run attached): its exit status is the container's.
        return subprocess.Popen(["podman"] + args, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)

    def probe(self, pod, probe, timeout=None):
        return http_probe(pod.ip, probe, timeout)

    def stop(self, pod):
        self._podman(["pod", "stop", "-t", "5", f"{self.prefix}-{pod.name}"], check=False)

    def close(self):
        for name in self.pods:
            self._podman(["pod", "rm", "-f", f"{self.prefix}-{name}"], check=False)
        self._podman(["network", "rm", "-f", self.net], check=False)


# --- The run ---------------------------------------------------------------------------------

def run(docs, backend, secrets=None, timeout=180, keep_logs=None):
    """Starts every pod of `docs`, waits for the pods that run to completion (Jobs,
    PyTorchJobs) and then for the others to exit by themselves (LayerPS' scheduler and
    servers end with the job), up to `timeout` s. Returns the pods (ip, logs, ready_s,
    live_ok, exit_codes)."""
    secrets = secrets or {}
    workdir = backend.workdir
    pods = pods_of(docs)
    for p in pods:
        backend.create(p)
    services = services_of(docs, pods)
    hosts = os.path.join(workdir, "hosts")
    with open(hosts, "w") as f:
        f.write(hosts_file(pods, services))
    plans = []
    for p in pods:
        vols = volume_dirs(p, docs, workdir)
        for c in p.spec["containers"]:
            plans.append((p, c, container_env(p, c, docs, secrets, services), vols))
    done = threading.Event()

    def prober(p):
        # Kubernetes' kubelet: the readiness probe until it passes (the pod's start time),
        # then the liveness probe once.
        c = p.spec["containers"][0]
        ready = c.get("readinessProbe") or c.get("livenessProbe")
        live = c.get("livenessProbe")
        while not done.is_set() and all(pr.poll() is None for pr in p.procs):
            if ready and "httpGet" in ready and p.ready_s is None:
                # Polled every 50 ms with a short timeout (a pod whose address is not up yet
                # would hold a probe for its whole timeoutSeconds): stricter, never looser.
                if backend.probe(p, ready, 0.25):
                    p.ready_s = time.monotonic() - p.started
                    continue  # the liveness probe at once: a short job may end the pod soon
            elif live and "httpGet" in live and p.live_ok is None:
                p.live_ok = backend.probe(p, live)
            else:
                return
            time.sleep(0.05)

    t_start = time.monotonic()
    threads = []
    deadline = t_start + timeout
    try:
        for p, c, env, vols in plans:
            log_path = os.path.join(keep_logs or workdir, f"{p.name}.{c['name']}.log")
            with open(log_path, "w") as log:
                p.started = p.started or time.monotonic()
                p.procs.append(backend.start(p, c, env, hosts, vols, log))
            p.logs.append(log_path)
            if len(p.procs) == len(p.spec["containers"]):
                threads.append(threading.Thread(target=prober, args=(p,), daemon=True))
                threads[-1].start()
        while time.monotonic() < deadline:
            if all(pr.poll() is not None for p in pods if p.completes for pr in p.procs):
                break
            time.sleep(0.05)
        # The others end with the job (or are stopped after a grace period).
        grace = min(deadline, time.monotonic() + 30)
        while time.monotonic() < grace and any(pr.poll() is None for p in pods for pr in p.procs):
            time.sleep(0.1)
    finally:
        for p in pods:
            if any(pr.poll() is None for pr in p.procs):
                backend.stop(p)
        for p in pods:
            for pr in p.procs:
                try:
                    pr.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(pr.pid, 9)
                    pr.wait()
            p.exit_codes = [pr.returncode for pr in p.procs]
        done.set()
        for t in threads:
            t.join()
    return pods


def summary(pods):
    out = []
    for p in pods:
        text = "".join(open(lp, errors="replace").read() for lp in p.logs)
        out.append({"pod": p.name, "kind": p.kind, "ip": p.ip, "ready_s": p.ready_s,
                    "live_ok": p.live_ok, "exit_codes": p.exit_codes, "log": text})
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("manifests", nargs="+")
    how = ap.add_mutually_exclusive_group(required=True)
    how.add_argument("--podman", metavar="IMAGE", help="run the containers from IMAGE with podman")
    how.add_argument("--netns", action="store_true", help="run the host's build outputs in network namespaces")
    ap.add_argument("--bin-dir", default=None, help="--netns: the directory of layerps-scheduler, "
                    "layerps-server and the python3 with layerps (default: this checkout's .venv/bin)")
    ap.add_argument("--secret", action="append", default=[], metavar="NAME=KEY=VALUE",
                    help="a Secret's key, as `kubectl create secret generic NAME --from-literal=KEY=VALUE`")
    ap.add_argument("--timeout", type=float, default=180)
    ap.add_argument("--json", action="store_true", help="print a JSON summary (with the logs)")
    a = ap.parse_args(argv)
    secrets = {}
    for s in a.secret:
        name, key, value = s.split("=", 2)
        secrets.setdefault(name, {})[key] = value
    docs = load(a.manifests)
    with tempfile.TemporaryDirectory(prefix="layerps-pods.") as workdir:
        t0 = time.monotonic()
        if a.podman:
            backend = Podman(a.podman, workdir)
        else:
            root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
            backend = Netns(a.bin_dir or os.path.join(root, ".venv", "bin"), workdir)
        try:
            pods = run(docs, backend, secrets, a.timeout)
        finally:
            backend.close()
        total = time.monotonic() - t0
        s = summary(pods)
    ok = True
    for p in s:
        ok &= all(c == 0 for c in p["exit_codes"])
        ready = f"ready in {p['ready_s']:.2f} s" if p["ready_s"] is not None else "never ready"
        print(f"{p['pod']:<28} {p['ip']:<14} {ready:<18} exit {p['exit_codes']}")
        for line in p["log"].splitlines():
            if line.startswith("LAYERPS-POD") or "rror" in line:
                print(f"    {line[:300]}")
    print(f"run_pods: {len(s)} pods, {total:.1f} s in all: {'every pod exited 0' if ok else 'FAILED'}")
    if a.json:
        print(json.dumps(s, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
