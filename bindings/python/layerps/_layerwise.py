"""Layer-wise parallelism: OptCNN's strategies executed (docs/optcnn.md, "The layer-wise
executor").

Every layer of a sequential CNN runs in its own parallel configuration ``Degrees{n, c, h,
w}``: its output is cut into ``n·c·h·w`` equal tiles (sample, channel, height, width), tile
``t = ((tn·c + tc)·h + th)·w + tw`` computed by device ``t`` (the worker at position t of
the process set; a configuration of p tiles leaves devices p.. idle for that layer). This
is the tile rule of the search and its cost model, and the boxes moved between layers are
the ones its transfer cost counts:

* **Between layers** each device assembles the box of the previous layer's output its tile
  reads (its samples; all input channels and the window's rows and columns, halo included,
  for a convolution; the same channels and the window for a pooling; the same box for an
  element-wise layer; the whole (C, H, W) of its samples for a fully connected layer) from
  the tiles that hold it: one ``alltoall`` over the set per edge, only the parts held on
  another device on the wire. Backward, the gradients of the same boxes go back the same
  way and are summed into the source tiles (halos overlap). An edge on which nothing
  crosses (a data-parallel chain) makes no call at all.
* **Weights**: a layer's output channels own their weights, so device t holds the shard of
  channel block tc, replicated over the ``n·h·w`` tiles with that tc; after the backward
  pass each shard's gradient is summed over its replicas (``grouped_allreduce`` over that
  process set; none when it has one replica) and every replica applies the same SGD step.
* **The loss**: the last layer's tiles are gathered into whole rows of logits, split by
  sample over the devices (the largest count of them that divides the batch); each device
  adds the cross-entropy of its samples over the global batch. This one small exchange
  (batch × classes × 4 bytes each way) is not in the cost model.
* **The input**: every device is handed the global batch and slices the box its tiles of
  the first layer read (the search charges no edge for the model input either).

A step is one SGD step on the global batch, the same as one process computes (within float
rounding; tested for data, model, OWT, spatial and mixed configurations).

Layers: ``nn.Conv2d`` (groups 1, dilation 1, numeric padding), ``nn.MaxPool2d`` and
``nn.AvgPool2d`` (dilation 1, floor mode; average pooling counting its zero padding),
``nn.Linear``, ``nn.Flatten`` (the identity here: a fully connected layer reads the whole
of each sample anyway), element-wise activations, ``nn.Dropout`` (each tile draws its own
mask), and an adaptive pooling that leaves its input's size. Anything else, batch norm
included (its statistics span the batch), is refused with the layer's name.
"""

import collections
import re

import numpy as np
import torch
import torch.nn.functional as F

from . import collectives as C
from .cluster import default_worker
from .errors import InvalidArgumentError

__all__ = ["LayerwiseTrainer", "parse_config"]

_ELEMENTWISE = (torch.nn.ReLU, torch.nn.ReLU6, torch.nn.LeakyReLU, torch.nn.GELU, torch.nn.SiLU,
                torch.nn.Sigmoid, torch.nn.Tanh, torch.nn.Identity, torch.nn.Hardswish,
                torch.nn.Hardsigmoid, torch.nn.Dropout, torch.nn.Dropout2d)
_CONFIG = re.compile(r"^(?:1|(?:n\d+)?(?:c\d+)?(?:h\d+)?(?:w\d+)?)$")


def parse_config(config):
    """A configuration as ``(n, c, h, w)``: a string as layerps-plan prints it (``1``,
    ``n4``, ``c2``, ``n2h2``), a dict ``{"n": .., "c": .., "h": .., "w": ..}`` (missing keys
    are 1) or a 4-sequence."""
    if isinstance(config, str):
        s = config.strip()
        if not s or not _CONFIG.match(s):
            raise InvalidArgumentError(f"layerwise: bad configuration {config!r} (expected 1, n4, c2, n2h2, ...)")
        d = dict(n=1, c=1, h=1, w=1)
        for k, v in re.findall(r"([nchw])(\d+)", s):
            d[k] = int(v)
        out = (d["n"], d["c"], d["h"], d["w"])
    elif isinstance(config, dict):
        unknown = set(config) - set("nchw")
        if unknown:
            raise InvalidArgumentError(f"layerwise: configuration {config!r} has keys {sorted(unknown)} "
                                       "(only n, c, h, w)")
        out = tuple(int(config.get(k, 1)) for k in "nchw")
    else:
        try:
            out = tuple(int(v) for v in config)
        except TypeError:
            raise InvalidArgumentError(f"layerwise: bad configuration {config!r}") from None
        if len(out) != 4:
            raise InvalidArgumentError(f"layerwise: a configuration has 4 degrees (n, c, h, w), got {config!r}")
    if any(v < 1 for v in out):
        raise InvalidArgumentError(f"layerwise: degrees must be >= 1, got {config!r}")
    return out


def _strategy_configs(strategy):
    """{layer name: (n, c, h, w)} from a layerps-plan report entry (``{"layers": [...]}``),
    a whole ``--strategy=optcnn --json`` report (its ``optcnn`` entry) or a mapping."""
    if isinstance(strategy, dict) and "optcnn" in strategy and "baselines" in strategy:
        strategy = strategy["optcnn"]
    if isinstance(strategy, dict) and "layers" in strategy and isinstance(strategy["layers"], list):
        out = {}
        for entry in strategy["layers"]:
            if not isinstance(entry, dict) or "layer" not in entry:
                raise InvalidArgumentError(f"layerwise: a strategy's layer entry needs 'layer', got {entry!r}")
            out[str(entry["layer"])] = parse_config(entry.get("degrees", entry.get("config")))
        return out
    if isinstance(strategy, dict):
        return {str(k): parse_config(v) for k, v in strategy.items()}
    raise InvalidArgumentError("layerwise: strategy must be a layerps-plan report, one of its strategies, "
                               "or a mapping of layer name to configuration")


class _Layer:
    """One layer: its kind, geometry (4-D, without the batch), weights' shard and tiles."""

    def __init__(self, name, module, kind, in_geo, out_geo):
        self.name, self.module, self.kind = name, module, kind
        self.in_geo, self.out_geo = in_geo, out_geo
        self.window = None  # per spatial dim: (kernel, stride, padding) for conv and pool
        self.degrees = None
        self.params = []  # this device's shards (leaf tensors), in the module's order
        self.param_names = []


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def _geo(shape):
    """A per-sample output shape as (C, H, W)."""
    s = tuple(int(v) for v in shape[1:])
    if len(s) == 1:
        return (s[0], 1, 1)
    if len(s) == 3:
        return s
    raise InvalidArgumentError(f"layerwise: an output of shape {tuple(shape)} is neither (B, C) nor (B, C, H, W)")


class LayerwiseTrainer:
    """Trains a ``torch.nn.Sequential`` CNN with one parallel configuration per layer.

    ``strategy``: a ``layerps-plan --strategy=optcnn --json`` report (its search's pick), one
    of its strategies (``report["baselines"][k]``: data, model, owt) or ``{layer name:
    configuration}`` (``"n2h2"``, a dict or a 4-tuple) naming every child of ``model``.
    ``example_input``: a global batch (its first dimension is the global batch size every
    step must have). ``lr``: plain SGD's. Every worker of ``process_set`` (default all)
    constructs it with the same model (the same initial weights: seed it) and calls
    :meth:`step` with the same global batch, in the same order; position k of the set is
    device k.

    ``stats`` counts, for this device, the activation and gradient elements it sent between
    layers to other devices (``exchange_bytes``) and the gradient bytes it all-reduced
    (``sync_bytes``), summed over the steps."""

    def __init__(self, model, strategy, example_input, *, lr, process_set=None, worker=None, timeout=None):
        if not isinstance(model, torch.nn.Sequential):
            raise InvalidArgumentError(f"layerwise: runs a torch.nn.Sequential, got {type(model).__name__} "
                                       "(write the model as one Sequential of its layers)")
        if not isinstance(example_input, torch.Tensor) or example_input.dim() < 2:
            raise InvalidArgumentError("layerwise: example_input must be a global batch (B, ...)")
        self._w = worker or default_worker()
        self._set = process_set if isinstance(process_set, C.ProcessSet) else C.ProcessSet(process_set)
        if not self._set.included(self._w):
            raise InvalidArgumentError(f"layerwise: worker {self._w.rank} is not in {self._set!r}")
        self.devices = self._set.size(self._w)
        self.device = self._set.rank(self._w)
        self._ranks = self._set.ranks or list(range(self.devices))
        self.lr = float(lr)
        self.batch = int(example_input.shape[0])
        self._timeout = timeout
        self.stats = dict(steps=0, exchange_bytes=0, sync_bytes=0, loss_bytes=0)
        configs = _strategy_configs(strategy)
        self.layers = self._describe(model, example_input, configs)
        self._in_geo = _geo(example_input.shape)
        for layer in self.layers:
            self._shard(layer)
        if self.layers[-1].out_geo[1:] != (1, 1):
            raise InvalidArgumentError(f"layerwise: the last layer ({self.layers[-1].name}) must give logits "
                                       f"(B, classes), not (B, {self.layers[-1].out_geo})")
        # The exchange into every layer, and the loss's (whole rows of the logits).
        n_loss = max(d for d in range(1, self.devices + 1) if self.batch % d == 0)
        self._loss = _Layer("loss", None, "loss", self.layers[-1].out_geo, self.layers[-1].out_geo)
        self._loss.degrees = (n_loss, 1, 1, 1)
        self._edges = [None] + [self._plan_edge(self.layers[i - 1], self.layers[i])
                                for i in range(1, len(self.layers))]
        self._loss_edge = self._plan_edge(self.layers[-1], self._loss)
        self._first_box = self._needed(self.layers[0], self._tile_box(self.layers[0], self.device),
                                       self._in_geo) if self.device < self._tiles(self.layers[0]) else None

    # --- the model's layers and their geometry ---------------------------------------------
    def _describe(self, model, example_input, configs):
        children = list(model.named_children())
        if not children:
            raise InvalidArgumentError("layerwise: the model has no layers")
        names = [n for n, _ in children]
        missing = [n for n in names if n not in configs]
        if missing:
            raise InvalidArgumentError(f"layerwise: the strategy has no configuration for layer(s) {missing}")
        extra = sorted(set(configs) - set(names))
        if extra:
            raise InvalidArgumentError(f"layerwise: the strategy names layer(s) {extra} that the model lacks")
        shapes = []
        with torch.no_grad():
            x = example_input[:1].clone()  # an in-place first layer leaves the caller's as it is
            for name, mod in children:
                y = mod(x)
                shapes.append((tuple(x.shape), tuple(y.shape)))
                x = y
        layers, geo = [], _geo(example_input.shape)
        for (name, mod), (in_shape, out_shape) in zip(children, shapes):
            in_geo = geo
            if isinstance(mod, torch.nn.Conv2d):
                if mod.groups != 1 or _pair(mod.dilation) != (1, 1) or isinstance(mod.padding, str) \
                        or mod.padding_mode != "zeros":
                    raise InvalidArgumentError(f"layerwise: layer {name}: only convolutions with groups=1, "
                                               "dilation 1 and numeric zero padding")
                kind = "conv"
                window = list(zip(_pair(mod.kernel_size), _pair(mod.stride), _pair(mod.padding)))
            elif isinstance(mod, (torch.nn.MaxPool2d, torch.nn.AvgPool2d)):
                if getattr(mod, "ceil_mode", False) or _pair(getattr(mod, "dilation", 1)) != (1, 1) or \
                        (isinstance(mod, torch.nn.AvgPool2d) and (not mod.count_include_pad or
                                                                  mod.divisor_override)):
                    raise InvalidArgumentError(f"layerwise: layer {name}: only floor-mode pooling without "
                                               "dilation (average pooling counting its padding)")
                kind = "pool"
                k = _pair(mod.kernel_size)
                s = _pair(mod.stride if mod.stride is not None else mod.kernel_size)
                window = list(zip(k, s, _pair(mod.padding)))
            elif isinstance(mod, torch.nn.Linear):
                kind, window = "fc", None
            elif isinstance(mod, torch.nn.Flatten) or isinstance(mod, _ELEMENTWISE) or (
                    isinstance(mod, (torch.nn.AdaptiveAvgPool2d, torch.nn.AdaptiveMaxPool2d))
                    and out_shape == in_shape):
                kind, window = "elementwise", None
            else:
                raise InvalidArgumentError(f"layerwise: layer {name} ({type(mod).__name__}) is not one the "
                                           "layer-wise executor runs (conv, pooling, linear, flatten, "
                                           "element-wise)")
            out_geo = in_geo if isinstance(mod, torch.nn.Flatten) else _geo(out_shape)
            if kind in ("conv", "pool") and len(in_shape) != 4:
                raise InvalidArgumentError(f"layerwise: layer {name} needs a (B, C, H, W) input")
            layer = _Layer(name, mod, kind, in_geo, out_geo)
            layer.window = window
            layer.degrees = configs[name]
            n, c, h, w = layer.degrees
            dims = (self.batch,) + out_geo
            if any(size % d for size, d in zip(dims, layer.degrees)) or n * c * h * w > self.devices:
                raise InvalidArgumentError(
                    f"layerwise: layer {name}: configuration n{n}c{c}h{h}w{w} does not fit its output "
                    f"(batch {self.batch}, C, H, W = {out_geo}) on {self.devices} devices (each degree must "
                    "divide its dimension, their product at most the device count)")
            layers.append(layer)
            geo = out_geo
        return layers

    @staticmethod
    def _tiles(layer):
        n, c, h, w = layer.degrees
        return n * c * h * w

    def _coords(self, layer, t):
        n, c, h, w = layer.degrees
        return (t // (c * h * w), (t // (h * w)) % c, (t // w) % h, t % w)

    def _tile_box(self, layer, t):
        """Tile t's box of the layer's output: ((n0, n1), (c0, c1), (h0, h1), (w0, w1))."""
        sizes = (self.batch,) + layer.out_geo
        return tuple((k * s // d, (k + 1) * s // d)
                     for k, s, d in zip(self._coords(layer, t), sizes, layer.degrees))

    def _needed(self, layer, box, src_geo):
        """The box of the layer's input a tile with output box `box` reads, clipped to the
        input, and the padding on each side of each spatial dimension (unclipped window)."""
        (n0, n1), (c0, c1), (h0, h1), (w0, w1) = box
        C_, H, W = src_geo
        if layer.kind in ("fc", "loss"):
            return ((n0, n1), (0, C_), (0, H), (0, W)), ((0, 0), (0, 0))
        if layer.kind == "elementwise":
            return box, ((0, 0), (0, 0))
        chans = (0, C_) if layer.kind == "conv" else (c0, c1)
        spans, pads = [], []
        for (o0, o1), size, (k, s, p) in zip(((h0, h1), (w0, w1)), (H, W), layer.window):
            lo, hi = o0 * s - p, (o1 - 1) * s - p + k
            spans.append((max(lo, 0), min(hi, size)))
            pads.append((max(0, -lo), max(0, hi - size)))
        return ((n0, n1), chans, spans[0], spans[1]), tuple(pads)

    # --- weights: this device's shard ----------------------------------------------------
    def _shard(self, layer):
        mod = layer.module
        if layer.kind not in ("conv", "fc") or self.device >= self._tiles(layer):
            return
        (c0, c1) = self._tile_box(layer, self.device)[1]
        for pname, p in mod.named_parameters(recurse=False):
            layer.params.append(p.detach()[c0:c1].clone().requires_grad_(True))
            layer.param_names.append(pname)
        # The replicas of this shard: the tiles with the same channel block.
        n, c, h, w = layer.degrees
        tc = self._coords(layer, self.device)[1]
        layer.replicas = [t for t in range(self._tiles(layer)) if self._coords(layer, t)[1] == tc]

    # --- the exchange between two layers ----------------------------------------------------
    def _plan_edge(self, src, dst):
        """Which part of this device's source tile goes to which device, and which part of
        this device's needed box comes from which device (slices), for the edge src -> dst."""
        ps, pd = self._tiles(src), self._tiles(dst)
        src_boxes = [self._tile_box(src, t) for t in range(ps)]
        needs = [self._needed(dst, self._tile_box(dst, t), src.out_geo) for t in range(pd)]
        me = self.device

        def meet(a, b):
            box = tuple((max(x0, y0), min(x1, y1)) for (x0, x1), (y0, y1) in zip(a, b))
            return None if any(hi <= lo for lo, hi in box) else box

        def rel(box, origin):
            return tuple(slice(lo - o, hi - o) for (lo, hi), (o, _) in zip(box, origin))

        crosses = any(meet(src_boxes[s], needs[d][0]) for s in range(ps) for d in range(pd) if s != d)
        edge = dict(crosses=crosses, send={}, recv={}, local=None,
                    need=needs[me] if me < pd else None, tile=src_boxes[me] if me < ps else None)
        for d in range(pd):
            if me < ps:
                part = meet(src_boxes[me], needs[d][0])
                if part is not None:
                    if d == me:
                        edge["local"] = (rel(part, src_boxes[me]), rel(part, needs[d][0]))
                    else:
                        edge["send"][d] = (rel(part, src_boxes[me]), tuple(hi - lo for lo, hi in part))
        if me < pd:
            for s in range(ps):
                if s == me:
                    continue
                part = meet(src_boxes[s], needs[me][0])
                if part is not None:
                    edge["recv"][s] = (rel(part, needs[me][0]), tuple(hi - lo for lo, hi in part))
        return edge

    def _alltoall(self, parts, what):
        """Sends parts[d] (flat float32) to device d; returns {device: flat tensor}."""
        splits = [int(parts[d].numel()) if d in parts else 0 for d in range(self.devices)]
        buf = torch.cat([parts[d].reshape(-1) for d in range(self.devices) if d in parts]) if parts \
            else torch.zeros(0)
        got, counts = C.alltoall(buf.contiguous(), splits, process_set=self._set, worker=self._w,
                                 timeout=self._timeout, name=what)
        self.stats["loss_bytes" if what.startswith("layerwise.loss.") else "exchange_bytes"] += 4 * sum(splits)
        out, at = {}, 0
        for d, cnt in enumerate(counts.tolist()):
            out[d] = got[at:at + cnt]
            at += cnt
        return out

    def _forward_exchange(self, edge, tile, name):
        """The box this device's destination tile reads, from the source tiles (None when
        this device holds no destination tile)."""
        box = None
        if edge["need"] is not None:
            shape = tuple(hi - lo for lo, hi in edge["need"][0])
            if edge["local"] and not edge["recv"] and tuple(tile[edge["local"][0]].shape) == shape:
                box = tile[edge["local"][0]]  # all of it is here: no copy
            else:
                box = torch.empty(shape)
                if edge["local"]:
                    src_sl, dst_sl = edge["local"]
                    box[dst_sl] = tile[src_sl]
        if edge["crosses"]:
            parts = {d: tile[sl].reshape(-1) for d, (sl, _) in edge["send"].items()}
            got = self._alltoall(parts, f"layerwise.{name}.fwd")
            for s, (sl, shape) in edge["recv"].items():
                box[sl] = self._chunk(got, s, shape, f"layer {name}: device {s}'s activations")
        return box

    def _backward_exchange(self, edge, grad_box, name):
        """The gradient of this device's source tile: every destination's gradient of the
        part of its box this tile supplied, summed (None when it holds no source tile)."""
        grad = None
        if edge["tile"] is not None:
            grad = torch.zeros(tuple(hi - lo for lo, hi in edge["tile"]))
            if edge["local"] is not None and grad_box is not None:
                src_sl, dst_sl = edge["local"]
                grad[src_sl] += grad_box[dst_sl]
        if edge["crosses"]:
            parts = {s: grad_box[sl].reshape(-1) for s, (sl, _) in edge["recv"].items()} \
                if grad_box is not None else {}
            got = self._alltoall(parts, f"layerwise.{name}.bwd")
            for d, (sl, shape) in edge["send"].items():
                grad[sl] += self._chunk(got, d, shape, f"layer {name}: device {d}'s gradients")
        return grad

    @staticmethod
    def _chunk(got, peer, shape, what):
        """What `peer` sent, as a box of `shape`; a count that does not match is an error
        (the devices disagree on the strategy or the batch), never a silent misfit."""
        chunk = got.get(peer)
        n = 0 if chunk is None else chunk.numel()
        if n != int(np.prod(shape)):
            raise InvalidArgumentError(f"layerwise: {what}: {n} elements, expected {int(np.prod(shape))} "
                                       "(do all devices run the same strategy and batch?)")
        return chunk.view(shape)

    # --- compute ---------------------------------------------------------------------------
    def _compute(self, layer, x, pads):
        (ph0, ph1), (pw0, pw1) = pads
        if layer.kind == "conv":
            if ph0 or ph1 or pw0 or pw1:
                x = F.pad(x, (pw0, pw1, ph0, ph1))
            return F.conv2d(x, self._param(layer, "weight"), self._param(layer, "bias"),
                            stride=tuple(s for _, s, _ in layer.window))
        if layer.kind == "pool":
            k = tuple(k for k, _, _ in layer.window)
            s = tuple(s for _, s, _ in layer.window)
            if isinstance(layer.module, torch.nn.MaxPool2d):
                if ph0 or ph1 or pw0 or pw1:
                    x = F.pad(x, (pw0, pw1, ph0, ph1), value=float("-inf"))
                return F.max_pool2d(x, k, s)
            if ph0 or ph1 or pw0 or pw1:
                x = F.pad(x, (pw0, pw1, ph0, ph1))
            return F.avg_pool2d(x, k, s)
        if layer.kind == "fc":
            y = F.linear(x.reshape(x.shape[0], -1), self._param(layer, "weight"), self._param(layer, "bias"))
            return y.view(y.shape[0], y.shape[1], 1, 1)
        if isinstance(layer.module, torch.nn.Flatten) or isinstance(
                layer.module, (torch.nn.AdaptiveAvgPool2d, torch.nn.AdaptiveMaxPool2d)):
            return x
        if getattr(layer.module, "inplace", False):
            x = x.clone()  # the input is a leaf that keeps its gradient
        return layer.module(x)

    @staticmethod
    def _param(layer, name):
        return layer.params[layer.param_names.index(name)] if name in layer.param_names else None

    # --- a step ----------------------------------------------------------------------------
    def step(self, x, y):
        """One SGD step on the global batch ``x`` (every device passes the same) with labels
        ``y``; returns the batch's mean cross-entropy (the same on every device)."""
        if x.dim() < 2 or _geo(x.shape) != self._in_geo:
            raise InvalidArgumentError(f"layerwise: input of shape {tuple(x.shape)}; the example input's "
                                       f"samples are {self._in_geo}")
        if x.shape[0] != self.batch or y.shape[0] != self.batch:
            raise InvalidArgumentError(f"layerwise: a step takes the global batch of {self.batch} samples "
                                       f"(got {x.shape[0]} inputs, {y.shape[0]} labels)")
        x4 = x if x.dim() == 4 else x.reshape(x.shape[0], -1, 1, 1)
        saved = []  # per layer: (its input leaf or None, its output tile or None)
        tile = None
        for i, layer in enumerate(self.layers):
            holds = self.device < self._tiles(layer)
            if i == 0:
                box = x4[tuple(slice(lo, hi) for lo, hi in self._first_box[0])] if holds else None
                pads = self._first_box[1] if holds else None
            else:
                box = self._forward_exchange(self._edges[i], tile, layer.name)
                pads = self._edges[i]["need"][1] if holds else None
            if holds:
                inp = box.detach().requires_grad_(i > 0)
                with torch.enable_grad():
                    out = self._compute(layer, inp, pads)
                saved.append((inp if i > 0 else None, out))
                tile = out.detach()
            else:
                saved.append((None, None))
                tile = None
        # The loss over whole rows of logits, split by sample.
        logits = self._forward_exchange(self._loss_edge, tile, "loss.logits")
        loss_sum = torch.zeros(1)
        grad = None
        if logits is not None:
            (n0, n1) = self._loss_edge["need"][0][0]
            z = logits.detach().reshape(n1 - n0, -1).requires_grad_(True)
            with torch.enable_grad():
                loss = F.cross_entropy(z, y[n0:n1], reduction="sum") / self.batch
                loss.backward()
            loss_sum += loss.detach()
            grad = z.grad.view(logits.shape)
        grad = self._backward_exchange(self._loss_edge, grad, "loss.logits")
        for i in range(len(self.layers) - 1, -1, -1):
            layer = self.layers[i]
            inp, out = saved[i]
            grad_box = None
            if out is not None and out.requires_grad:
                torch.autograd.backward(out, grad)
                grad_box = inp.grad if inp is not None else None
            if i > 0:
                grad = self._backward_exchange(self._edges[i], grad_box, layer.name)
        self._sync_and_update()
        C.allreduce(loss_sum, process_set=self._set, worker=self._w, timeout=self._timeout,
                    name="layerwise.loss_value")
        self.stats["steps"] += 1
        return float(loss_sum[0])

    def _sync_and_update(self):
        for layer in self.layers:
            if not layer.params:
                continue
            grads = [p.grad for p in layer.params]
            if len(layer.replicas) > 1:
                C.grouped_allreduce(grads, process_set=C.ProcessSet([self._ranks[t] for t in layer.replicas]),
                                    worker=self._w, timeout=self._timeout, name=f"layerwise.{layer.name}.sync")
                r = len(layer.replicas)
                self.stats["sync_bytes"] += int(2 * (r - 1) / r * sum(4 * g.numel() for g in grads))
            with torch.no_grad():
                for p in layer.params:
                    p -= self.lr * p.grad
                    p.grad = None

    # --- the whole model -------------------------------------------------------------------
    def state_dict(self):
        """Every layer's whole parameters, assembled from the shards (collective over the
        set): an ordered dict with the Sequential's keys (``conv1.weight``...)."""
        out = collections.OrderedDict()
        for layer in self.layers:
            for pname, p in layer.module.named_parameters(recurse=False):
                full = torch.zeros_like(p.detach())
                if layer.params and layer.replicas[0] == self.device:  # one owner per shard
                    (c0, c1) = self._tile_box(layer, self.device)[1]
                    full[c0:c1] = layer.params[layer.param_names.index(pname)].detach()
                C.allreduce(full, process_set=self._set, worker=self._w, timeout=self._timeout,
                            name=f"layerwise.{layer.name}.{pname}.gather")
                out[f"{layer.name}.{pname}"] = full
        return out
