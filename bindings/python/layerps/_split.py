"""The split step of Park's and Stanza's placement (layerps.placement.SplitTrainer), and
cutting a model into the prefix and suffix it trains (split_sequential, split_model).
Reached through :mod:`layerps.placement`."""

import collections

import numpy as np
import torch

from ._profile import _TRACE_LOCK, _tensor_args, _trace
from .collectives import allgather, alltoall
from .errors import InvalidArgumentError


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
    # The children keep their names, so the prefix's tables carry the layer names that a
    # placement (layerps-plan, install_placement) pins.
    children = list(model.named_children())
    return (torch.nn.Sequential(collections.OrderedDict(children[:index])),
            torch.nn.Sequential(collections.OrderedDict(children[index:])))


def split_model(model, cut):
    """(prefix, suffix) of any ``nn.Module`` cut before layer ``cut``, such that
    ``suffix(prefix(x)) == model(x)``. An ``nn.Sequential`` is cut between its children
    (``cut``: a child's name or index; :func:`split_sequential`). Any other module is traced
    with torch.fx and cut in its graph before the module call (or operation) ``cut`` names,
    as :func:`profile` names its layers: a module path such as ``"classifier.0"`` for
    torchvision's VGG, ``"fc"`` for ResNet. The point must be a cut: the suffix may read one
    value computed before it and not the model's input (else InvalidArgumentError naming
    what crosses). Both halves keep the model's parameter names (``features.0.weight``)."""
    if isinstance(model, torch.nn.Sequential):
        return split_sequential(model, cut)
    if not isinstance(cut, str):
        raise InvalidArgumentError("split_model: name the layer to cut before (e.g. 'classifier.0', 'fc')")
    try:
        gm = _trace(model)
    except Exception as e:  # noqa: BLE001 (torch raises many kinds)
        raise InvalidArgumentError(f"split_model: torch.fx cannot trace {type(model).__name__} ({e})") from e
    nodes = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output", "get_attr")]
    names = [str(n.target) if n.op == "call_module" else n.name for n in nodes]
    if cut not in names:
        known = [n for n, node in zip(names, nodes) if node.op == "call_module"]
        raise InvalidArgumentError(f"split_model: no module call or operation {cut!r} in the traced model "
                                   f"(module calls: {', '.join(known[:40])}{' ...' if len(known) > 40 else ''})")
    at = names.index(cut)
    if at == 0:
        raise InvalidArgumentError(f"split_model: cut {cut!r} leaves an empty prefix")
    prefix_nodes = set(nodes[:at])
    crossing = []
    for n in nodes[at:]:
        for a in _tensor_args(n):
            if a.op == "placeholder":
                raise InvalidArgumentError(f"split_model: {cut!r} is not a cut point: {names[nodes.index(n)]!r} "
                                           f"after it reads the model's input")
            if a in prefix_nodes and a not in crossing:
                crossing.append(a)
    if len(crossing) != 1:
        raise InvalidArgumentError(f"split_model: {cut!r} is not a cut point: the layers after it read "
                                   f"{len(crossing)} values computed before it "
                                   f"({', '.join(a.name for a in crossing)}); pick a layer all paths go through")
    # Two graphs over the same modules: GraphModule copies the ones each graph calls under
    # their qualified names, so the parameters keep theirs.
    front, env = torch.fx.Graph(), {}
    for n in gm.graph.nodes:
        if n.op in ("placeholder", "get_attr") or n in prefix_nodes:
            env[n] = front.node_copy(n, lambda a: env[a])
    front.output(env[crossing[0]])
    back, env2 = torch.fx.Graph(), {crossing[0]: None}
    env2[crossing[0]] = back.placeholder(crossing[0].name)
    for n in gm.graph.nodes:
        if n.op != "placeholder" and n not in prefix_nodes:
            env2[n] = back.node_copy(n, lambda a: env2[a])
    halves = []
    for g in (front, back):
        half = torch.fx.GraphModule(model, g)
        half.graph.eliminate_dead_code()
        half.recompile()
        halves.append(torch.fx.GraphModule(model, half.graph))  # only what is still called
    return tuple(halves)


class SplitTrainer:
    """One model trained split at a cut over several worker ranks (plain SGD).

    ``conv_workers``: the ranks that run the prefix on their own batches; ``suffix_rank``:
    the rank that runs the suffix (Park's PS worker beside the dedicated server, or
    Stanza's FC node), or ``suffix_ranks``: several FC nodes (N_f > 1), in one of two ways
    (``suffix_parallel``):

    * ``"data"`` (Stanza): conv worker k sends to FC node ``k % N_f``; each FC node trains a
      replica of the suffix on its workers' activations and the replicas all-reduce their
      gradients among themselves (``Worker.allreduce`` over the FC nodes only), so they
      stay equal.
    * ``"channel"`` (model parallelism; OptCNN's channel-parallel FC layers, the FC half of
      "one weird trick"): every conv worker sends its activations to every FC node; FC node
      j holds rows ``[j*out/N_f, (j+1)*out/N_f)`` of every ``nn.Linear`` of the suffix (its
      output channels; ``out_features`` must divide by N_f) and updates only those, so no
      weight is replicated. After each linear layer the FC nodes all-gather their output
      columns (worker-to-worker sends); the layers without parameters (ReLU, ...) and the
      loss run on the whole tensor on every FC node; backward, the gradient of each linear
      layer's input is all-reduced among the FC nodes, and FC node ``k % N_f`` returns conv
      worker k its activation gradient. ``channel_degrees`` ({layer name: K}, 1 <= K <= N_f)
      puts a linear layer's rows on the first K FC nodes only (OptCNN may pick ``c2`` for one
      layer and one device for the next), or, K = ``"replica"``, the whole layer on every FC
      node, each computing it on the whole batch (the copies stay equal without exchange);
      default N_f for every layer. A suffix module with
      parameters other than ``nn.Linear`` is refused. :meth:`gather_suffix` assembles the
      whole suffix on every FC node (for evaluation).

    Each rank builds the
    same ``model`` (same seed) and calls :meth:`step` once per training step: conv workers
    with their batch ``(x, y)``, suffix ranks with none. ``loss_fn(output, y)`` must
    average over the batch: the step's loss is the mean over the global batch of
    ``len(conv_workers) * batch`` samples.

    The prefix's parameters live on the servers in dense tables (rule ``sgd``), one per
    parameter, tagged with the prefix layer's name so that a placement can pin them; the
    suffix's stay on the suffix ranks. The exchanges are typed collectives among the
    conv workers and suffix ranks (``alltoall``: activations as float32, labels as int64,
    activation gradients back; channel-parallel FC nodes ``allgather`` their output blocks
    and ``alltoall`` their partial sums), so every rank with a role calls :meth:`step`.
    """

    def __init__(self, worker, model, cut, loss_fn, *, lr, conv_workers, suffix_rank=None, batch,
                 example_input, suffix_ranks=None, name="split", timeout=60.0, suffix_parallel="data",
                 channel_degrees=None):
        self.w = worker
        if suffix_parallel not in ("data", "channel"):
            raise InvalidArgumentError(f"SplitTrainer: suffix_parallel must be 'data' or 'channel', "
                                       f"not {suffix_parallel!r}")
        self.suffix_parallel = suffix_parallel
        self.rank = worker.rank
        self.conv_workers = [int(r) for r in conv_workers]
        if (suffix_rank is None) == (suffix_ranks is None):
            raise InvalidArgumentError("SplitTrainer: give suffix_rank or suffix_ranks (not both)")
        self.suffix_ranks = [int(suffix_rank)] if suffix_ranks is None else [int(r) for r in suffix_ranks]
        if not self.conv_workers or not self.suffix_ranks:
            raise InvalidArgumentError("SplitTrainer: needs conv workers and at least one suffix rank")
        if len(self.suffix_ranks) > len(self.conv_workers) and suffix_parallel == "data":
            raise InvalidArgumentError("SplitTrainer: more suffix ranks than conv workers (data-parallel replicas "
                                       "each serve at least one)")
        if set(self.suffix_ranks) & set(self.conv_workers) or len(set(self.suffix_ranks)) != len(self.suffix_ranks):
            raise InvalidArgumentError("SplitTrainer: a suffix rank cannot also be a conv worker or appear twice")
        self.suffix_rank = self.suffix_ranks[0]
        if self.rank not in self.conv_workers and self.rank not in self.suffix_ranks:
            raise InvalidArgumentError(f"SplitTrainer: rank {self.rank} has no role")
        # The process sets of the exchanges, ascending (the collectives' member order).
        self.members = sorted(self.conv_workers + self.suffix_ranks)
        self.fc_members = sorted(self.suffix_ranks)
        self.batch = int(batch)
        self.loss_fn = loss_fn
        self.lr = float(lr)
        self.timeout = timeout
        self.prefix, self.suffix = split_model(model, cut)
        self.channel = suffix_parallel == "channel" and len(self.suffix_ranks) > 1
        if self.channel:
            self._check_channel_suffix(channel_degrees)
        elif channel_degrees:
            raise InvalidArgumentError("SplitTrainer: channel_degrees needs suffix_parallel='channel' and several "
                                       "FC nodes")
        # Under the trace lock: torch.fx patches nn.Module.__call__ for every thread while it
        # traces, so a forward beside another thread's trace (workers as threads of one
        # process, as in the tests) would be taken for part of that trace. The barrier
        # below ends every trainer's tracing before any step runs.
        with _TRACE_LOCK, torch.no_grad():
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
            # The conv workers this suffix rank serves (their positions in conv_workers):
            # it returns their activation gradients (and, data-parallel, trains on their
            # activations only; channel-parallel, every FC node trains on every worker's).
            f = self.suffix_ranks.index(self.rank)
            self.served = [k for k in range(len(self.conv_workers)) if k % len(self.suffix_ranks) == f]
            self.inputs = list(range(len(self.conv_workers))) if self.channel else self.served
            if self.channel:
                self.shards = self._make_shards(f)
                # An FC node that holds no block of any layer (possible with channel_degrees)
                # still runs the replicated layers and the collectives.
                params = [p for shard in self.shards.values() for p in shard]
                self.optimizer = torch.optim.SGD(params, lr=self.lr) if params else None
            else:
                self.optimizer = torch.optim.SGD(self.suffix.parameters(), lr=self.lr)

    # --- channel-parallel suffix ------------------------------------------------------------
    def _check_channel_suffix(self, degrees):
        n = len(self.suffix_ranks)
        degrees = dict(degrees or {})
        self.degrees = {}
        for mname, m in self.suffix.named_children():
            if isinstance(m, torch.nn.Linear):
                k = degrees.pop(mname, n)
                if k == "replica":
                    self.degrees[mname] = k
                    continue
                k = int(k)
                if not 1 <= k <= n:
                    raise InvalidArgumentError(f"SplitTrainer: channel degree {k} of layer {mname!r} is not in "
                                               f"1..{n} (the FC nodes)")
                if m.out_features % k:
                    raise InvalidArgumentError(
                        f"SplitTrainer: channel-parallel suffix: layer {mname!r} has {m.out_features} output "
                        f"features, not divisible by the {k} FC nodes")
                self.degrees[mname] = k
            elif list(m.parameters(recurse=True)):
                raise InvalidArgumentError(
                    f"SplitTrainer: channel-parallel suffix: layer {mname!r} ({type(m).__name__}) has parameters "
                    "but is not an nn.Linear; only linear layers split by output channel")
        if degrees:
            raise InvalidArgumentError(f"SplitTrainer: channel_degrees names {sorted(degrees)}, which are not "
                                       "linear layers of the suffix")

    def _make_shards(self, f):
        """{layer name: [weight rows, bias rows]} of FC node f (the layers it holds a block
        of), copied from the whole model."""
        shards = {}
        for mname, m in self.suffix.named_children():
            k = self.degrees.get(mname)
            if k == "replica":
                k, f_rows = 1, 0  # the whole layer, on every FC node
            else:
                f_rows = f
            if k is None or f_rows >= k:
                continue
            rows = m.out_features // k
            shard = [torch.nn.Parameter(m.weight.detach()[f_rows * rows:(f_rows + 1) * rows].clone())]
            if m.bias is not None:
                shard.append(torch.nn.Parameter(m.bias.detach()[f_rows * rows:(f_rows + 1) * rows].clone()))
            shards[mname] = shard
        return shards

    def _gather_blocks(self, local, k, shape, dim):
        """The blocks of FC nodes 0..k-1 (each of `shape`), concatenated along `dim`, on every
        FC node (an all-gather among the FC nodes; the others contribute nothing)."""
        holders = self.suffix_ranks[:k]
        mine = (local.contiguous().reshape(-1) if self.rank in holders
                else torch.zeros(0, device=self._device()))
        flat = allgather(mine, process_set=self.fc_members, timeout=self.timeout, worker=self.w)
        size = int(np.prod(shape))
        order = [r for r in self.fc_members if r in holders]  # the gathered blocks' order
        parts = {r: flat[i * size:(i + 1) * size].view(shape) for i, r in enumerate(order)}
        return torch.cat([parts[r] for r in holders], dim=dim)

    def _reduce_to_owners(self, partial, blocks, dim):
        """Reduce-scatter of per-FC-node partial sums: `blocks` lists (start, end, owner rank)
        slices of `partial` along `dim`; each owner gets the sum over the FC nodes of its
        slices (added in FC node order); the other slices of the result are zero (nobody
        reads them). One all-to-all among the FC nodes carries every slice to its owner."""
        me = self.rank
        out = torch.zeros_like(partial)
        sends, splits = [], []
        for r in self.fc_members:  # what goes to member r: its slices, in block order
            mine = [partial.narrow(dim, s, e - s).reshape(-1) for s, e, o in blocks if o == r]
            sends += mine
            splits.append(sum(t.numel() for t in mine))
        got, got_splits = alltoall(torch.cat(sends) if sends else partial.new_zeros(0), splits,
                                   process_set=self.fc_members, timeout=self.timeout, worker=self.w)
        from_member = dict(zip(self.fc_members, got.split([int(c) for c in got_splits])))
        at = 0
        for start, end, owner in blocks:
            if owner != me:
                continue
            target = out.narrow(dim, start, end - start)
            n = target.numel()
            total = from_member[self.suffix_ranks[0]][at:at + n].clone()
            for r in self.suffix_ranks[1:]:
                total += from_member[r][at:at + n]
            target.copy_(total.view_as(target))
            at += n
        return out

    def _input_gradient_owners(self):
        """For each linear layer of the suffix, who needs which part of its input's gradient:
        the layer before it (skipping element-wise ones) if that one is channel-parallel
        (holder b of its K blocks needs column block b), the FC nodes serving the conv
        workers if it is the first (FC node k % N_f needs conv worker k's rows), or everyone
        the whole gradient (None) after a replicated layer."""
        needs, previous = {}, None
        n = len(self.suffix_ranks)
        for mname, m in self.suffix.named_children():
            if not isinstance(m, torch.nn.Linear):
                continue
            if previous is None:
                needs[mname] = ("rows", [(k * self.batch, (k + 1) * self.batch, self.suffix_ranks[k % n])
                                         for k in range(len(self.conv_workers))])
            elif self.degrees[previous] == "replica":
                needs[mname] = None
            else:
                k = self.degrees[previous]
                cols = self.suffix.get_submodule(previous).out_features // k
                needs[mname] = ("cols", [(b * cols, (b + 1) * cols, self.suffix_ranks[b]) for b in range(k)])
            previous = mname
        return needs

    def _channel_forward(self, x):
        trainer = self
        f = self.suffix_ranks.index(self.rank)
        needs = self._input_gradient_owners()

        class ChannelLinear(torch.autograd.Function):
            # y = x W^T + b with W's rows in blocks on FC nodes 0..k-1. Forward: the holders
            # compute their columns of y and all-gather them (every FC node gets all of y; the
            # rest of the suffix runs on it replicated). Backward: every FC node has the same
            # gradient of y; a holder takes its columns for its rows' gradients, and the
            # input's gradient is the sum over holders of (its columns) x (its rows): reduced
            # to the FC nodes that read each part (_input_gradient_owners; the others add
            # zeros), or all-reduced when every FC node reads all of it.
            @staticmethod
            def forward(ctx, inp, weight, bias, k, out_features, need):
                ctx.k, ctx.has_bias, ctx.need = k, bias is not None, need
                ctx.save_for_backward(inp, weight)
                rows = out_features // k
                local = torch.nn.functional.linear(inp, weight, bias) if f < k else None
                return trainer._gather_blocks(local, k, (inp.shape[0], rows), 1)

            @staticmethod
            def backward(ctx, g):
                inp, weight = ctx.saved_tensors
                gw = gb = None
                if f < ctx.k:
                    rows = weight.shape[0]
                    gj = g[:, f * rows:(f + 1) * rows]
                    gx = (gj @ weight).contiguous()
                    gw = gj.t() @ inp
                    gb = gj.sum(0) if ctx.has_bias else None
                else:
                    gx = torch.zeros_like(inp).contiguous()
                if ctx.need is None:
                    trainer.w.allreduce(gx, timeout=trainer.timeout, ranks=trainer.suffix_ranks)
                else:
                    dim = 0 if ctx.need[0] == "rows" else 1
                    gx = trainer._reduce_to_owners(gx, ctx.need[1], dim)
                return gx, gw, gb, None, None, None

        empty = torch.empty(0, device=x.device)
        for mname, m in self.suffix.named_children():
            if isinstance(m, torch.nn.Linear) and self.degrees[mname] == "replica":
                # Every FC node computes it whole on the same input: the same gradients, the
                # same updates, so the copies stay equal without any exchange.
                shard = self.shards[mname]
                x = torch.nn.functional.linear(x, shard[0], shard[1] if len(shard) > 1 else None)
            elif isinstance(m, torch.nn.Linear):
                shard = self.shards.get(mname)
                weight = shard[0] if shard else empty
                bias = shard[1] if shard and len(shard) > 1 else None
                x = ChannelLinear.apply(x, weight, bias, self.degrees[mname], m.out_features, needs[mname])
            else:
                x = m(x)
        return x

    def gather_suffix(self):
        """Channel-parallel: assembles the whole suffix (every FC node's rows) into
        ``self.suffix`` (the model's own modules) on every FC node. A collective over the FC
        nodes; a no-op otherwise (each replica already holds the whole suffix)."""
        if not self.channel or self.rank not in self.suffix_ranks:
            return self.suffix
        with torch.no_grad():
            for mname, m in self.suffix.named_children():
                k = self.degrees.get(mname)
                if k is None:
                    continue
                if k == "replica":
                    for full, own in zip([m.weight, m.bias], self.shards[mname]):
                        full.copy_(own.detach())
                    continue
                shard = self.shards.get(mname)
                rows = m.out_features // k
                for j, full in enumerate([m.weight] + ([m.bias] if m.bias is not None else [])):
                    shape = (rows,) + tuple(full.shape[1:])
                    local = shard[j].detach() if shard else None
                    full.copy_(self._gather_blocks(local, k, shape, 0))
        return self.suffix

    def _device(self):
        """Where the suffix's parameters live (a GPU: the exchanges and pulls stay there)."""
        for p in self.suffix.parameters():
            return p.device
        return torch.device("cpu")

    def _suffix_of(self, k):
        return self.suffix_ranks[k % len(self.suffix_ranks)]

    def _exchange(self, blocks, like):
        """One all-to-all among the ranks with a role: ``blocks`` maps a destination rank
        to the tensor sent there (same row shape as ``like``); returns {source rank: the
        rows it sent here}."""
        sends = [blocks[r] for r in self.members if r in blocks]
        splits = [blocks[r].shape[0] if r in blocks else 0 for r in self.members]
        x = torch.cat(sends) if sends else like.new_zeros((0,) + tuple(like.shape[1:]))
        got, got_splits = alltoall(x.contiguous(), splits, process_set=self.members, timeout=self.timeout,
                                   worker=self.w)
        return dict(zip(self.members, got.split([int(c) for c in got_splits])))

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
        for t, p in self.tables:  # this step's prefix parameters
            with torch.no_grad():
                w.pull(t, p.data.view(-1)).wait(self.timeout)
        act = self.prefix(x)
        sent = act.detach().to(torch.float32).contiguous()
        labels = y.to(torch.int64).contiguous()
        suffix = self._suffix_of(k)
        receivers = self.suffix_ranks if self.channel else [suffix]
        self._exchange({r: sent for r in receivers}, sent)
        self._exchange({r: labels for r in receivers}, labels)
        grad = self._exchange({}, sent)[suffix].view(self.act_shape)
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
        dev = self._device()
        got_acts = self._exchange({}, torch.zeros((0,) + self.act_shape[1:], device=dev))
        got_labels = self._exchange({}, torch.zeros(0, dtype=torch.int64, device=dev))
        x = torch.cat([got_acts[self.conv_workers[k]] for k in self.inputs]).requires_grad_(True)
        y = torch.cat([got_labels[self.conv_workers[k]] for k in self.inputs])
        if self.optimizer is not None:
            self.optimizer.zero_grad()
        if self.channel:
            # Every FC node computes the loss of the whole global batch from the gathered
            # output; its weight rows get exactly their gradient (no all-reduce needed).
            loss = self.loss_fn(self._channel_forward(x), y)
            loss.backward()
            global_loss = float(loss.detach())
        else:
            out = self.suffix(x)
            # This node's share of the loss averaged over the global batch: the replicas'
            # shares (and their gradients, once all-reduced) add up to the global mean's.
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
                total = torch.tensor([float(loss.detach())], device=dev)
                w.allreduce(total, timeout=self.timeout, ranks=self.suffix_ranks)
                global_loss = float(total[0])
            else:
                global_loss = float(loss.detach())
        if self.optimizer is not None:
            self.optimizer.step()
        grads = x.grad.split(self.batch)
        self._exchange({self.conv_workers[k]: grads[self.inputs.index(k)] for k in self.served}, x.grad)
        w.barrier(timeout=self.timeout)
        return global_loss

    def prefix_parameters(self):
        """The prefix's current parameters as the servers hold them (pulled)."""
        out = []
        for t, p in self.tables:
            buf = torch.empty(p.numel(), device=p.device)
            self.w.pull(t, buf).wait(self.timeout)
            out.append(buf.view_as(p))
        return out
