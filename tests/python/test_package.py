"""The package's version and its tools' --version lines: one source (CMakeLists.txt)."""
import os
import re
import subprocess

import layerps

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def cmake_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        m = re.search(r"project\(LayerPS VERSION ([0-9]+\.[0-9]+\.[0-9]+)", f.read())
    assert m, "CMakeLists.txt lost its project(LayerPS VERSION ...) line"
    return m.group(1)


def test_version_is_the_cmake_projects():
    assert layerps.__version__ == cmake_version()
    assert layerps.__commit__  # a commit hash, or "unknown" outside a checkout


def test_every_bundled_tool_prints_the_same_version():
    for tool in ("layerps-scheduler", "layerps-server", "layerps-launch", "layerps-keygen", "layerps-plan"):
        r = subprocess.run([layerps.tool_path(tool), "--version"], capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == f"{tool} (LayerPS {layerps.__version__}, commit {layerps.__commit__})"


def test_the_build_tree_package_lists_every_python_file():
    """bindings/python/CMakeLists.txt copies the pure-Python files by name into the build
    tree's package (LAYERPS_BUILD_PYTHON): a file missing there imports in the wheel but
    not from the build tree."""
    import re
    src = os.path.join(ROOT, "bindings", "python")
    with open(os.path.join(src, "CMakeLists.txt")) as f:
        listed = re.search(r"set\(LAYERPS_PY_FILES\s+([^)]*)\)", f.read()).group(1).split()
    present = sorted(f for f in os.listdir(os.path.join(src, "layerps")) if f.endswith(".py"))
    assert sorted(listed) == present


def test_the_build_tree_package_lists_every_file_of_layerps_torch():
    """layerps.torch is a package (layerps/torch/): CMakeLists.txt lists its files apart."""
    src = os.path.join(ROOT, "bindings", "python")
    with open(os.path.join(src, "CMakeLists.txt")) as f:
        listed = re.search(r"set\(LAYERPS_PY_TORCH_FILES\s+([^)]*)\)", f.read()).group(1).split()
    present = sorted(f for f in os.listdir(os.path.join(src, "layerps", "torch")) if f.endswith(".py"))
    assert sorted(listed) == present


# The public names layerps.torch had as one module (torch.py, before it became a package),
# less the modules it imported (io, itertools, np, pickle, threading, torch).
TORCH_PUBLIC_NAMES = [
    "Average", "Compression", "DistributedOptimizer", "Embedding", "EmbeddingBag",
    "FailedPreconditionError", "InvalidArgumentError", "Max", "Min", "ProcessSet", "Product", "Sum",
    "add_process_set", "allgather", "allgather_async", "allgather_object", "allreduce", "allreduce_",
    "allreduce_async", "allreduce_async_", "alltoall", "alltoall_async", "barrier", "broadcast",
    "broadcast_", "broadcast_async", "broadcast_async_", "broadcast_object", "broadcast_optimizer_state",
    "broadcast_parameters", "cross_rank", "cross_size", "default_worker", "global_process_set",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_",
    "init", "is_initialized", "join", "local_rank", "local_size", "poll", "rank", "remove_process_set",
    "shutdown", "size", "synchronize",
]
# Added since: the recommendation-model classes (layerps/torch/collection.py).
TORCH_NEW_NAMES = ["EmbeddingBagCollection", "EmbeddingBagConfig", "EmbeddingCollection", "EmbeddingConfig",
                   "JaggedTensor", "KeyedJaggedTensor", "KeyedTensor"]
TORCH_SUBMODULES = ["backend", "collection", "elastic", "embedding", "hooks", "ops", "optimizer"]


def test_layerps_torch_keeps_its_public_names():
    """Splitting layerps.torch into ops, optimizer and embedding changed no public name:
    ``import layerps.torch as hvd`` sees what it saw, plus its modules (the torch.distributed
    backend and the DDP hooks among them)."""
    import types

    import layerps.torch as lt

    names = [n for n in dir(lt) if not n.startswith("_")]
    public = sorted(n for n in names if not isinstance(getattr(lt, n), types.ModuleType))
    assert public == sorted(TORCH_PUBLIC_NAMES + TORCH_NEW_NAMES)
    modules = sorted(n for n in names if isinstance(getattr(lt, n), types.ModuleType))
    assert modules == TORCH_SUBMODULES
    for m in TORCH_SUBMODULES:
        assert getattr(lt, m).__name__ == f"layerps.torch.{m}"
    # __all__ (``from layerps.torch import *``): as before, with EmbeddingBag and the new names.
    assert sorted(lt.__all__) == sorted(set(TORCH_PUBLIC_NAMES + TORCH_NEW_NAMES) -
                                        {"FailedPreconditionError", "InvalidArgumentError", "default_worker"})
    # One object under both names (the package re-exports, it does not copy).
    assert lt.DistributedOptimizer is lt.optimizer.DistributedOptimizer
    assert lt.Embedding is lt.embedding.Embedding and lt.EmbeddingBag is lt.embedding.EmbeddingBag
    assert lt.init is lt.ops.init and lt.Compression is lt.ops.Compression
    assert lt.broadcast_parameters is lt.ops.broadcast_parameters


def test_layerps_cluster_keeps_its_public_names():
    """cluster.py's node classes moved to _nodes.py; layerps.cluster's names stayed."""
    import types

    import layerps.cluster as c

    public = sorted(n for n in dir(c)
                    if not n.startswith("_") and not isinstance(getattr(c, n), types.ModuleType))
    assert public == sorted([
        "FailedPreconditionError", "Handle", "InvalidArgumentError", "LocalCluster", "OPTION_FIELDS", "Options",
        "Scheduler", "Server", "Table", "Worker", "as_input", "as_keys", "as_output", "bin_dir", "default_worker",
        "host_cluster", "init", "is_tensor", "launcher", "make_options", "shutdown", "tool_path"])
    assert sorted(c.__all__) == sorted([
        "Options", "make_options", "Handle", "Table", "Scheduler", "Server", "Worker", "LocalCluster", "bin_dir",
        "tool_path", "init", "shutdown", "default_worker"])
