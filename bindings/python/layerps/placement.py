"""Layer placement from PyTorch: profile a model, and train it split at a cut.

* :func:`profile` measures a sequential PyTorch model layer by layer (forward hooks) and
  returns a model profile in the JSON format of docs/placement.md, which ``layerps-plan
  --model=FILE.json`` reads.
* :class:`SplitTrainer` runs the split step of Park's and Stanza's placement: the *conv
  workers* run the layers before the cut (their parameters go through the parameter
  server, as in data-parallel training), send their activations to the *suffix node*, which
  runs the layers after the cut on the concatenated batch of every conv worker, updates
  their parameters locally (they never cross the network) and returns each worker the
  gradient of its activations. With the loss averaged over the global batch, a step is
  exactly a data-parallel SGD step on the global batch (tested).

Every call here is collective over the worker ranks the trainer names, in the same order.
"""

import numpy as np
import torch

from .errors import InvalidArgumentError

__all__ = ["profile", "split_sequential", "SplitTrainer"]

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


def profile(model, example_input, name="model"):
    """A profile of ``model`` (an ``nn.Sequential``; its children are the layers) measured
    on ``example_input`` (a batch; sizes are per sample). Returns a dict in the JSON profile
    format (``json.dumps`` it for ``layerps-plan --model=FILE.json``)."""
    if not isinstance(model, torch.nn.Sequential):
        raise InvalidArgumentError("profile: the model must be a torch.nn.Sequential (its children are the layers)")
    if not isinstance(example_input, torch.Tensor) or example_input.dim() < 1 or example_input.shape[0] < 1:
        raise InvalidArgumentError("profile: example_input must be a tensor with a batch dimension")
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
            elif isinstance(mod, torch.nn.Linear):
                shape = dict(in_channels=mod.in_features, in_height=1, in_width=1,
                             out_channels=mod.out_features, out_height=1, out_width=1)
            if shape:
                layer["shape"] = {k: int(v) for k, v in shape.items()}
            layers.append(layer)
            previous[0] = child_name
        return run

    for child_name, child in model.named_children():
        hooks.append(child.register_forward_hook(hook(child_name, child)))
    try:
        with torch.no_grad():
            model(example_input)
    finally:
        for h in hooks:
            h.remove()
    return {"name": name, "input_bytes_per_sample": int(example_input[0].numel() * 4), "layers": layers}


def split_sequential(model, cut):
    """(prefix, suffix) of an ``nn.Sequential`` cut before child ``cut`` (its name or index)."""
    if not isinstance(model, torch.nn.Sequential):
        raise InvalidArgumentError("split_sequential: the model must be a torch.nn.Sequential")
    names = [n for n, _ in model.named_children()]
    if isinstance(cut, str):
        if cut not in names:
            raise InvalidArgumentError(f"split_sequential: no layer {cut!r} (layers: {names})")
        index = names.index(cut)
    else:
        index = int(cut)
    if not 0 < index < len(names):
        raise InvalidArgumentError(f"split_sequential: cut {cut!r} leaves an empty side")
    children = list(model.children())
    return torch.nn.Sequential(*children[:index]), torch.nn.Sequential(*children[index:])


class SplitTrainer:
    """One model trained split at a cut over several worker ranks (plain SGD).

    ``conv_workers``: the ranks that run the prefix on their own batches; ``suffix_rank``:
    the rank that runs the suffix (Park's PS worker beside the dedicated server, or
    Stanza's FC node), or ``suffix_ranks``: several FC nodes (Stanza's N_f > 1), conv worker
    k sending to FC node ``k % N_f``; each FC node trains a replica of the suffix on its
    workers' activations and the replicas all-reduce their gradients among themselves
    (``Worker.allreduce`` over the FC nodes only), so they stay equal. Each rank builds the
    same ``model`` (same seed) and calls :meth:`step` once per training step: conv workers
    with their batch ``(x, y)``, suffix ranks with none. ``loss_fn(output, y)`` must
    average over the batch: the step's loss is the mean over the global batch of
    ``len(conv_workers) * batch`` samples.

    The prefix's parameters live on the servers in dense tables (rule ``sgd``), one per
    parameter, tagged with the prefix layer's name so that a placement can pin them; the
    suffix's stay on the suffix ranks. Labels travel as float32 beside the activations.
    """

    def __init__(self, worker, model, cut, loss_fn, *, lr, conv_workers, suffix_rank=None, batch,
                 example_input, suffix_ranks=None, name="split", timeout=60.0):
        self.w = worker
        self.rank = worker.rank
        self.conv_workers = [int(r) for r in conv_workers]
        if (suffix_rank is None) == (suffix_ranks is None):
            raise InvalidArgumentError("SplitTrainer: give suffix_rank or suffix_ranks (not both)")
        self.suffix_ranks = [int(suffix_rank)] if suffix_ranks is None else [int(r) for r in suffix_ranks]
        if not self.conv_workers or not self.suffix_ranks:
            raise InvalidArgumentError("SplitTrainer: needs conv workers and at least one suffix rank")
        if len(self.suffix_ranks) > len(self.conv_workers):
            raise InvalidArgumentError("SplitTrainer: more suffix ranks than conv workers")
        if set(self.suffix_ranks) & set(self.conv_workers) or len(set(self.suffix_ranks)) != len(self.suffix_ranks):
            raise InvalidArgumentError("SplitTrainer: a suffix rank cannot also be a conv worker or appear twice")
        self.suffix_rank = self.suffix_ranks[0]
        if self.rank not in self.conv_workers and self.rank not in self.suffix_ranks:
            raise InvalidArgumentError(f"SplitTrainer: rank {self.rank} has no role")
        self.batch = int(batch)
        self.loss_fn = loss_fn
        self.lr = float(lr)
        self.timeout = timeout
        self.prefix, self.suffix = split_sequential(model, cut)
        with torch.no_grad():
            shape = self.prefix(example_input[: self.batch]).shape
        if shape[0] != self.batch:
            raise InvalidArgumentError("SplitTrainer: example_input must hold at least `batch` samples")
        self.act_shape = tuple(shape)
        self.act_numel = int(np.prod(self.act_shape))
        self.step_no = 0
        # The prefix's parameters on the servers; the root conv worker sets their values.
        self.tables = []
        for pname, p in self.prefix.named_parameters():
            layer = pname.split(".")[0]
            t = worker.declare_dense(f"{name}.{pname}", p.numel(), "sgd", lr=self.lr, layer=layer)
            self.tables.append((t, p))
        if self.rank == self.conv_workers[0]:
            for t, p in self.tables:
                worker.assign(t, p.detach().reshape(-1).contiguous()).wait(timeout)
        worker.barrier(timeout=timeout)
        if self.rank in self.suffix_ranks:
            self.optimizer = torch.optim.SGD(self.suffix.parameters(), lr=self.lr)
            # The conv workers this suffix rank serves (their positions in conv_workers).
            f = self.suffix_ranks.index(self.rank)
            self.served = [k for k in range(len(self.conv_workers)) if k % len(self.suffix_ranks) == f]

    def _suffix_of(self, k):
        return self.suffix_ranks[k % len(self.suffix_ranks)]

    def _tags(self, k):
        base = (self.step_no * len(self.conv_workers) + k) * 4
        return base, base + 1, base + 2

    def step(self, x=None, y=None):
        """One training step. Conv workers pass their batch and get None; the suffix rank
        gets the loss of the global batch."""
        try:
            if self.rank in self.suffix_ranks:
                return self._suffix_step()
            return self._conv_step(x, y)
        finally:
            self.step_no += 1

    def _conv_step(self, x, y):
        if x is None or y is None or x.shape[0] != self.batch:
            raise InvalidArgumentError(f"SplitTrainer.step: a conv worker needs a batch of {self.batch} samples")
        w, k = self.w, self.conv_workers.index(self.rank)
        act_tag, label_tag, grad_tag = self._tags(k)
        for t, p in self.tables:  # this step's prefix parameters
            with torch.no_grad():
                w.pull(t, p.data.view(-1)).wait(self.timeout)
        act = self.prefix(x)
        sent = act.detach().contiguous()
        labels = y.to(torch.float32).contiguous()
        suffix = self._suffix_of(k)
        h1 = w.send_to(suffix, act_tag, sent)
        h2 = w.send_to(suffix, label_tag, labels)
        grad = torch.empty(self.act_shape)
        w.recv_from(suffix, grad_tag, grad).wait(self.timeout)
        h1.wait(self.timeout)
        h2.wait(self.timeout)
        for _, p in self.tables:
            p.grad = None
        act.backward(grad)
        # Each worker's gradient is its share of the global mean: the servers' sgd rule
        # applies their sum, which is the global-batch gradient.
        handles = [w.push(t, p.grad.reshape(-1).contiguous()) for t, p in self.tables]
        for h in handles:
            h.wait(self.timeout)
        w.barrier(timeout=self.timeout)  # every push of this step applied before next pulls
        return None

    def _suffix_step(self):
        w = self.w
        acts, labels = [], []
        handles = []
        for k in self.served:
            act_tag, label_tag, _ = self._tags(k)
            a = torch.empty(self.act_shape)
            l = torch.empty(self.batch)
            handles.append(w.recv_from(self.conv_workers[k], act_tag, a))
            handles.append(w.recv_from(self.conv_workers[k], label_tag, l))
            acts.append(a)
            labels.append(l)
        for h in handles:
            h.wait(self.timeout)
        x = torch.cat(acts).requires_grad_(True)
        y = torch.cat(labels).to(torch.int64)
        self.optimizer.zero_grad()
        out = self.suffix(x)
        # This node's share of the loss averaged over the global batch: the replicas' shares
        # (and their gradients, once all-reduced) add up to the global mean's.
        share = len(self.served) / len(self.conv_workers)
        loss = self.loss_fn(out, y) * share
        loss.backward()
        if len(self.suffix_ranks) > 1:
            params = [p for p in self.suffix.parameters()]
            flat = torch.cat([p.grad.reshape(-1) for p in params]).contiguous()
            w.allreduce(flat, timeout=self.timeout, ranks=self.suffix_ranks)
            at = 0
            for p in params:
                p.grad.copy_(flat[at:at + p.numel()].view_as(p))
                at += p.numel()
            total = torch.tensor([float(loss.detach())])
            w.allreduce(total, timeout=self.timeout, ranks=self.suffix_ranks)
            global_loss = float(total[0])
        else:
            global_loss = float(loss.detach())
        self.optimizer.step()
        grads = x.grad.split(self.batch)
        sends = []
        for i, k in enumerate(self.served):
            _, _, grad_tag = self._tags(k)
            sends.append(w.send_to(self.conv_workers[k], grad_tag, grads[i].contiguous()))
        for h in sends:
            h.wait(self.timeout)
        w.barrier(timeout=self.timeout)
        return global_loss

    def prefix_parameters(self):
        """The prefix's current parameters as the servers hold them (pulled)."""
        out = []
        for t, p in self.tables:
            buf = torch.empty(p.numel())
            self.w.pull(t, buf).wait(self.timeout)
            out.append(buf.view_as(p))
        return out
