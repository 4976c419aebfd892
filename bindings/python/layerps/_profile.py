"""Profiles of PyTorch models for the planner (layerps.placement.profile): an
``nn.Sequential`` layer by layer through forward hooks, any other ``nn.Module`` through its
torch.fx graph. Reached through :mod:`layerps.placement`."""

import statistics
import threading
import time

import numpy as np
import torch

from .errors import InvalidArgumentError


_KINDS = {
    torch.nn.Conv2d: "conv",
    torch.nn.Linear: "fc",
    torch.nn.MaxPool2d: "pool",
    torch.nn.AvgPool2d: "pool",
    torch.nn.AdaptiveAvgPool2d: "pool",
    torch.nn.BatchNorm2d: "norm",
    torch.nn.BatchNorm1d: "norm",
    torch.nn.LayerNorm: "norm",
    torch.nn.Embedding: "embedding",
    torch.nn.EmbeddingBag: "embedding",
}


def _kind(module):
    for cls, kind in _KINDS.items():
        if isinstance(module, cls):
            return kind
    return "other"


def _flops(module, inp, out):
    """Forward FLOPs per sample (a multiply-add is 2) for the layers that have weights."""
    if isinstance(module, torch.nn.Conv2d):
        kh, kw = module.kernel_size
        cin = module.in_channels // module.groups
        return 2.0 * out[0].numel() * cin * kh * kw
    if isinstance(module, torch.nn.Linear):
        return 2.0 * module.in_features * module.out_features
    return float(out[0].numel())  # element-wise work


def profile(model, example_input, name="model", *, time_layers=False, repeats=3):
    """A profile of ``model`` measured on ``example_input`` (a batch; sizes are per
    sample). Returns a dict in the JSON profile format (``json.dumps`` it for
    ``layerps-plan --model=FILE.json``).

    ``time_layers=True`` also times every layer: its forward and backward on the inputs it
    saw, with torch's current threads, the median of ``repeats`` runs after one warm-up,
    divided by the batch (``train_seconds_per_sample``), and measures the
    float32 matrix-product FLOP/s once with the same threads (``reference_flops``, :func:`probe`). The cost model
    then uses those times, scaled by each node's FLOP/s, instead of FLOP counts: kernels
    run at very different rates per FLOP (a convolution through oneDNN can run tens of
    times faster per FLOP than a small-batch linear layer through a generic BLAS), which
    a FLOP count cannot see. The model's parameters, their ``.grad`` and its batch-norm
    statistics are left as they were.

    An ``nn.Sequential``: its children are the layers. Any other ``nn.Module`` (ResNet,
    Inception, VGG with its ``features``/``avgpool``/``classifier``...) is traced with
    torch.fx and its graph becomes the layers, so residual and branching models get their
    DAG: every module with parameters and every pooling is a layer named by its module
    path (``layer1.0.conv1``), a batch norm right after a convolution is folded into it
    (as the built-in profiles do), element-wise activations, dropout, flatten and
    reshapes are not layers (their output is their input's), and additions and
    concatenations are layers of kind "other" with several inputs. A model that torch.fx
    cannot trace (data-dependent control flow) is refused with torch's reason."""
    if not isinstance(example_input, torch.Tensor) or example_input.dim() < 1 or example_input.shape[0] < 1:
        raise InvalidArgumentError("profile: example_input must be a tensor with a batch dimension")
    if not isinstance(model, torch.nn.Module):
        raise InvalidArgumentError(f"profile: expected a torch.nn.Module, got {type(model).__name__}")
    example_input = example_input.detach().clone()  # an in-place first layer leaves the caller's as it is
    if not isinstance(model, torch.nn.Sequential):
        out = _traced_profile(model, example_input, name, time_layers, repeats)
        if time_layers:
            _add_reference_flops(out)
        return out
    layers = []
    hooks = []
    previous = [None]

    def hook(child_name, module):
        def run(mod, inp, out):
            out_t = out if isinstance(out, torch.Tensor) else out[0]
            layer = {
                "name": child_name,
                "kind": _kind(mod),
                "param_bytes": int(sum(p.numel() for p in mod.parameters(recurse=True)) * 4),
                "flops_per_sample": _flops(mod, inp, out_t),
                "activation_bytes": int(out_t[0].numel() * 4),
                "inputs": [] if previous[0] is None else [previous[0]],
            }
            shape = {}
            if isinstance(mod, torch.nn.Conv2d):
                shape = dict(in_channels=mod.in_channels, in_height=inp[0].shape[2], in_width=inp[0].shape[3],
                             out_channels=mod.out_channels, out_height=out_t.shape[2], out_width=out_t.shape[3],
                             kernel_h=mod.kernel_size[0], kernel_w=mod.kernel_size[1], stride=mod.stride[0],
                             padding=mod.padding[0])
            elif isinstance(mod, (torch.nn.MaxPool2d, torch.nn.AvgPool2d)) and out_t.dim() == 4:
                def first(v):
                    return v[0] if isinstance(v, (tuple, list)) else v
                k = mod.kernel_size if isinstance(mod.kernel_size, (tuple, list)) else (mod.kernel_size,) * 2
                shape = dict(in_channels=inp[0].shape[1], in_height=inp[0].shape[2], in_width=inp[0].shape[3],
                             out_channels=out_t.shape[1], out_height=out_t.shape[2], out_width=out_t.shape[3],
                             kernel_h=k[0], kernel_w=k[1], stride=first(mod.stride if mod.stride else k[0]),
                             padding=first(mod.padding))
            elif isinstance(mod, torch.nn.Linear):
                shape = dict(in_channels=mod.in_features, in_height=1, in_width=1,
                             out_channels=mod.out_features, out_height=1, out_width=1)
            if shape:
                layer["shape"] = {k: int(v) for k, v in shape.items()}
            layers.append(layer)
            previous[0] = child_name
        return run

    seen = []  # (child, its inputs) in the order they ran

    def keep(mod, inp, out):
        seen.append((mod, inp))

    children = list(model.named_children())
    for child_name, child in children:
        hooks.append(child.register_forward_hook(hook(child_name, child)))
        if time_layers:
            hooks.append(child.register_forward_hook(keep))
    modes = _modes(model)
    if time_layers:
        model.eval()  # no batch-norm statistics updated by the extra runs
    try:
        forward_with_hooks(model, example_input, hooks)
        if time_layers:
            for layer, (mod, inp) in zip(layers, seen):
                layer["train_seconds_per_sample"] = _time_call(
                    lambda *a, m=mod: m(*a), inp, {}, mod, example_input, repeats) / example_input.shape[0]
    finally:
        _restore_modes(modes)
    out = {"name": name, "input_bytes_per_sample": int(example_input[0].numel() * 4), "layers": layers}
    if time_layers:
        _add_reference_flops(out)
    return out


def _modes(model):
    """Every submodule's train/eval flag (a frozen batch norm in a training model, say)."""
    return [(m, m.training) for m in model.modules()]


def _restore_modes(modes):
    for m, training in modes:
        m.training = training


def _add_reference_flops(prof):
    """The FLOP/s of float32 matrix products with torch's current threads (the probe the cluster's
    worker_flops come from), so that the cost model can scale the measured times."""
    from .autoplan import probe
    prof["reference_flops"] = float(probe()["worker_flops"])


def _time_call(fn, args, kwargs, module, model_input, repeats):
    """Seconds of one forward and backward of ``fn(*args, **kwargs)``: the median of
    ``repeats`` runs after a warm-up. Floating-point tensor arguments become leaves that
    need a gradient (except the model's input, as in training), passed as copies so that
    an in-place layer may write them; the backward is torch.autograd.grad of the output
    against those leaves and ``module``'s parameters, so no ``.grad`` is touched. 0 for an
    output without a gradient."""
    wrt = []
    leaves = []  # the model input's detached views, copied for every run (an in-place layer)

    def leaf(a):
        if isinstance(a, torch.Tensor):
            t = a.detach()
            if a is model_input:
                leaves.append(t)
            elif t.is_floating_point():
                t = t.clone().requires_grad_(True)
                wrt.append(t)
            return t
        if isinstance(a, (list, tuple)):
            return type(a)(leaf(x) for x in a)
        return a

    def fresh(a):  # a non-leaf copy of a leaf that needs a gradient (and of the model input)
        if isinstance(a, torch.Tensor):
            return a.clone() if a.requires_grad or id(a) in input_views else a
        if isinstance(a, (list, tuple)):
            return type(a)(fresh(x) for x in a)
        return a

    args = tuple(leaf(a) for a in args)
    kwargs = {k: leaf(v) for k, v in kwargs.items()}
    input_views = {id(t) for t in leaves}
    if module is not None:
        wrt += [p for p in module.parameters() if p.requires_grad]

    def copies():  # made before the clock starts: a copy is not the layer's time
        return fresh(args), {k: fresh(v) for k, v in kwargs.items()}

    def once(prepared):
        a, kw = prepared
        out = fn(*a, **kw)
        if isinstance(out, (tuple, list)):
            out = out[0]
        if not isinstance(out, torch.Tensor) or not out.requires_grad or not wrt:
            return False
        torch.autograd.grad(out, wrt, grad_outputs=torch.ones_like(out), allow_unused=True)
        return True

    with torch.enable_grad():
        if not once(copies()):
            return 0.0
        runs = []
        for _ in range(max(1, int(repeats))):
            prepared = copies()
            t0 = time.perf_counter()
            once(prepared)
            runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def forward_with_hooks(model, example_input, hooks):
    """One forward of ``model`` on ``example_input`` without gradients, for the forward
    hooks it carries (``hooks``: their handles), which are removed afterwards whatever
    happens."""
    try:
        with torch.no_grad():
            model(example_input)
    finally:
        for h in hooks:
            h.remove()


# --- any nn.Module: the torch.fx graph as the layers --------------------------------------
_PASS_MODULES = (torch.nn.ReLU, torch.nn.ReLU6, torch.nn.LeakyReLU, torch.nn.GELU, torch.nn.SiLU,
                 torch.nn.Sigmoid, torch.nn.Tanh, torch.nn.Dropout, torch.nn.Dropout2d, torch.nn.Identity,
                 torch.nn.Flatten, torch.nn.Hardswish, torch.nn.Hardsigmoid, torch.nn.Softmax,
                 torch.nn.LogSoftmax)
_PASS_FUNCTIONS = {"relu", "relu_", "relu6", "leaky_relu", "gelu", "silu", "sigmoid", "tanh", "dropout",
                   "flatten", "reshape", "view", "contiguous", "getitem", "getattr", "size", "softmax",
                   "log_softmax", "hardswish", "squeeze", "unsqueeze", "clone", "detach", "float", "to"}
_ADD_FUNCTIONS = {"add", "add_", "iadd", "sum", "mul", "mul_", "sub"}
_POOL_FUNCTIONS = {"max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "adaptive_max_pool2d", "fn",
                   "_max_pool2d", "max_pool2d_with_indices"}


# torch.fx's tracer patches torch.nn.Module.__call__ while it runs: traces of threads of one
# process (the in-process clusters of the tests) take turns, and so does a forward that
# may run beside another thread's trace (SplitTrainer's shape probe).
_TRACE_LOCK = threading.Lock()


def _trace(model):
    with _TRACE_LOCK:
        return torch.fx.symbolic_trace(model)


def _function_name(node):
    t = node.target
    return t if isinstance(t, str) else getattr(t, "__name__", str(t))


def _tensor_args(node):
    """The fx nodes among a node's arguments (lists and tuples flattened)."""
    out = []

    def visit(a):
        if isinstance(a, torch.fx.Node):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            for x in a:
                visit(x)
        elif isinstance(a, dict):
            for x in a.values():
                visit(x)

    visit(node.args)
    visit(node.kwargs)
    return out


def _layer_shape(mod, in_shape, out_shape):
    """The geometry the planner reads (convolutions, pooling, linear layers)."""
    shape = {}
    if isinstance(mod, torch.nn.Conv2d):
        shape = dict(in_channels=mod.in_channels, in_height=in_shape[2], in_width=in_shape[3],
                     out_channels=mod.out_channels, out_height=out_shape[2], out_width=out_shape[3],
                     kernel_h=mod.kernel_size[0], kernel_w=mod.kernel_size[1], stride=mod.stride[0],
                     padding=mod.padding[0] if isinstance(mod.padding, tuple) else 0)
    elif isinstance(mod, torch.nn.Linear):
        shape = dict(in_channels=mod.in_features, in_height=1, in_width=1,
                     out_channels=mod.out_features, out_height=1, out_width=1)
    return {k: int(v) for k, v in shape.items()}


def _traced_profile(model, example_input, name, time_layers=False, repeats=3):
    from torch.fx.passes.shape_prop import ShapeProp

    try:
        gm = _trace(model)
    except Exception as e:  # noqa: BLE001 (torch raises many kinds)
        raise InvalidArgumentError(f"profile: torch.fx cannot trace {type(model).__name__} ({e}); give an "
                                   f"nn.Sequential of its layers instead") from e
    modes = _modes(model)
    model.eval()
    try:
        with torch.no_grad():
            ShapeProp(gm).propagate(example_input)
    except Exception as e:  # noqa: BLE001
        raise InvalidArgumentError(f"profile: running {type(model).__name__} on an input of shape "
                                   f"{tuple(example_input.shape)} failed: {e}") from e
    finally:
        _restore_modes(modes)

    def out_shape(node):
        meta = node.meta.get("tensor_meta")
        return tuple(meta.shape) if meta is not None and hasattr(meta, "shape") else None

    def per_sample(shape):
        return int(np.prod(shape[1:])) if shape else 0

    layers, by_name = [], {}
    source = {}  # fx node -> the layer whose output it is ("" : the model input)
    users = {n: len(n.users) for n in gm.graph.nodes}
    counted = set()  # modules whose parameters are counted already (shared modules)

    def add_layer(node, lname, kind, inputs, param_bytes, flops, shape=None):
        if lname in by_name:
            lname = node.name
        layer = {"name": lname, "kind": kind, "param_bytes": int(param_bytes), "flops_per_sample": float(flops),
                 "activation_bytes": 4 * per_sample(out_shape(node)),
                 "inputs": sorted({source[i] for i in inputs if source.get(i)}, key=lambda n: by_name[n])}
        if shape:
            layer["shape"] = shape
        by_name[lname] = len(layers)
        layers.append(layer)
        source[node] = lname
        return layer

    for node in gm.graph.nodes:
        if node.op == "placeholder":
            source[node] = ""
            continue
        if node.op == "output":
            continue
        args = _tensor_args(node)
        shape = out_shape(node)
        if node.op == "get_attr":
            source[node] = ""
            continue
        if node.op == "call_module":
            mod = gm.get_submodule(node.target)
            params = 0 if id(mod) in counted else sum(p.numel() for p in mod.parameters()) * 4
            counted.add(id(mod))
            in_node = args[0] if args else None
            in_shape = out_shape(in_node) if in_node is not None else None
            if isinstance(mod, _PASS_MODULES):
                source[node] = source.get(in_node, "")
                continue
            if isinstance(mod, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)) and in_node is not None:
                prev = source.get(in_node)
                if prev and users[in_node] == 1 and layers[by_name[prev]]["kind"] in ("conv", "fc"):
                    layer = layers[by_name[prev]]  # folded into its convolution
                    layer["param_bytes"] += int(params)
                    layer["flops_per_sample"] += 2.0 * per_sample(shape)
                    source[node] = prev
                    continue
            if isinstance(mod, (torch.nn.AdaptiveAvgPool2d, torch.nn.AdaptiveMaxPool2d)) and shape == in_shape:
                source[node] = source.get(in_node, "")  # the identity at this input size
                continue
            out_t = torch.empty(shape) if shape else torch.empty(1, 1)
            flops = _flops(mod, None, out_t) if not isinstance(mod, (torch.nn.MaxPool2d, torch.nn.AvgPool2d)) \
                else float(per_sample(shape)) * np.prod(getattr(mod, "kernel_size", 1))
            kind = _kind(mod)
            if kind == "other" and params:
                kind = "fc" if shape is not None and len(shape) == 2 else "other"
            add_layer(node, node.target, kind, args, params, flops,
                      _layer_shape(mod, in_shape, shape) if in_shape and shape else None)
            continue
        fname = _function_name(node)
        if node.op in ("call_function", "call_method"):
            if fname in _PASS_FUNCTIONS or (len(args) == 1 and shape is not None and args
                                            and out_shape(args[0]) == shape and fname not in _POOL_FUNCTIONS):
                source[node] = source.get(args[0], "") if args else ""
                continue
            if fname in _POOL_FUNCTIONS or "pool" in fname:
                in_shape = out_shape(args[0]) if args else None
                if shape == in_shape:
                    source[node] = source.get(args[0], "")
                    continue
                k = node.kwargs.get("kernel_size", node.args[1] if len(node.args) > 1 else 1)
                window = int(np.prod(k)) if isinstance(k, (tuple, list)) else int(k) ** 2
                add_layer(node, node.name, "pool", args, 0, per_sample(shape) * window)
                continue
            # additions (residual joins), concatenations and anything else with a new value
            flops = per_sample(shape) * max(1, len(args) - 1) if fname in _ADD_FUNCTIONS else 0
            add_layer(node, node.name, "other", args, 0, flops)
    total = sum(p.numel() for p in model.parameters()) * 4
    counted_bytes = sum(l["param_bytes"] for l in layers)
    if counted_bytes != total:
        raise InvalidArgumentError(f"profile: the traced layers hold {counted_bytes} parameter bytes, the model "
                                   f"{total}: a parameter is used outside a module call (torch.fx saw it as an "
                                   f"attribute); give an nn.Sequential of its layers instead")
    if time_layers:
        _time_traced_layers(gm, model, example_input, layers, by_name, source, repeats)
    return {"name": name, "input_bytes_per_sample": int(example_input[0].numel() * 4), "layers": layers}


def _time_traced_layers(gm, model, example_input, layers, by_name, source, repeats):
    """Every graph node's forward and backward timed on the values it saw in one run of the
    graph, added to the layer its output belongs to (a folded batch norm and an
    activation to the layer before them)."""
    seen = []

    class Capture(torch.fx.Interpreter):
        def run_node(self, n):
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            seen.append((n, args, kwargs))
            return super().run_node(n)

    modes = _modes(model) + _modes(gm)
    gm.eval()
    model.eval()
    try:
        with torch.no_grad():
            Capture(gm).run(example_input)
        for layer in layers:
            layer["train_seconds_per_sample"] = 0.0
        for n, args, kwargs in seen:
            lname = source.get(n)
            if not lname or n.op not in ("call_module", "call_function", "call_method"):
                continue
            module = None
            if n.op == "call_module":
                module = gm.get_submodule(n.target)
                fn = module
            elif n.op == "call_function":
                fn = n.target
            else:
                def fn(obj, *a, _name=n.target, **k):
                    return getattr(obj, _name)(*a, **k)
            layers[by_name[lname]]["train_seconds_per_sample"] += _time_call(
                fn, args, kwargs, module, example_input, repeats) / example_input.shape[0]
    finally:
        _restore_modes(modes)
