"""PyTorch integration: Horovod's torch API, synchronous data-parallel training and
server-held embeddings.

* Horovod's API (:mod:`layerps.torch.ops`), so that a Horovod script ports by changing its
  import (``import layerps.torch as hvd``): :func:`init`, :func:`shutdown`, :func:`rank`,
  :func:`size`, :func:`local_rank`, :func:`local_size`, :func:`cross_rank`,
  :func:`cross_size`, :func:`allreduce` (and ``allreduce_``, ``allreduce_async``,
  ``allreduce_async_``), :func:`grouped_allreduce` (and its forms), :func:`allgather`,
  :func:`broadcast` (and ``broadcast_``), :func:`alltoall`, :func:`synchronize`,
  :func:`poll`, :func:`join`, :func:`barrier`, :func:`broadcast_parameters`,
  :func:`broadcast_optimizer_state`, :func:`broadcast_object`, :func:`allgather_object`,
  :class:`Compression`, the ops ``Average``, ``Sum``, ``Min``, ``Max``, ``Product``, and
  :class:`ProcessSet`. They run on the C++ collectives (docs/collectives.md); the table
  in docs/python.md says what differs from Horovod.
* :class:`DistributedOptimizer` (:mod:`layerps.torch.optimizer`) wraps a ``torch.optim``
  optimizer: after ``backward()``, ``step()`` sends the gradients through the cluster and
  leaves every worker's parameters equal (bulk-synchronous: step t of every worker sees
  exactly the gradients of step t).
* :class:`Embedding` and :class:`EmbeddingBag` (:mod:`layerps.torch.embedding`) are
  embedding tables whose rows live on the servers: forward pulls only the batch's unique
  rows, backward pushes only their gradient rows.
* Recommendation models (:mod:`layerps.torch.collection`, TorchRec's vocabulary):
  :class:`KeyedJaggedTensor` (many sparse features of a batch), :class:`EmbeddingBagConfig`,
  :class:`EmbeddingBagCollection` and :class:`EmbeddingCollection` (many tables, one fused
  pull and one fused push per server and step), returning a :class:`KeyedTensor`.

* Elastic training (:mod:`layerps.torch.elastic`, Horovod's ``hvd.elastic``): ``run``,
  ``TorchState`` (commit, restore, sync, reset callbacks) while the job grows and shrinks.

* ``torch.distributed.init_process_group(backend="layerps")`` (:mod:`layerps.torch.backend`,
  registered on import) and DDP communication hooks (:mod:`layerps.torch.hooks`): a DDP
  script runs on LayerPS unchanged, or keeps its backend and hands its gradients to
  LayerPS's all-reduce or to the servers.

Every function here is collective where it says so: all workers must call it, in the same
order, with tensors of the same shapes. The process's state (its default worker) is
layerps.cluster's: this package keeps none.
"""

from ..cluster import default_worker  # noqa: F401
from ..collectives import ProcessSet, global_process_set  # noqa: F401
from ..errors import FailedPreconditionError, InvalidArgumentError  # noqa: F401
from . import backend, collection, elastic, embedding, hooks, ops, optimizer  # noqa: F401
from .collection import (  # noqa: F401
    EmbeddingBagCollection, EmbeddingBagConfig, EmbeddingCollection, EmbeddingConfig, JaggedTensor,
    KeyedJaggedTensor, KeyedTensor,
)
from .embedding import Embedding, EmbeddingBag  # noqa: F401
from .ops import (  # noqa: F401
    Average, Compression, Max, Min, Product, Sum, add_process_set, allgather, allgather_async,
    allgather_object, allreduce, allreduce_, allreduce_async, allreduce_async_, alltoall, alltoall_async,
    barrier, broadcast, broadcast_, broadcast_async, broadcast_async_, broadcast_object,
    broadcast_optimizer_state, broadcast_parameters, cross_rank, cross_size, grouped_allreduce,
    grouped_allreduce_, grouped_allreduce_async, grouped_allreduce_async_, init, is_initialized, join,
    local_rank, local_size, poll, rank, remove_process_set, shutdown, size, synchronize,
)
from .optimizer import DistributedOptimizer  # noqa: F401

backend.register()  # torch.distributed.init_process_group(backend="layerps")

__all__ = ["DistributedOptimizer", "broadcast_parameters", "broadcast_optimizer_state", "Embedding",
           "rank", "size", "local_rank", "local_size", "cross_rank", "cross_size", "init", "shutdown",
           "is_initialized", "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
           "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
           "grouped_allreduce_async_", "allgather", "allgather_async", "broadcast", "broadcast_",
           "broadcast_async", "broadcast_async_", "alltoall", "alltoall_async", "synchronize", "poll",
           "join", "barrier", "broadcast_object", "allgather_object", "Compression", "Average",
           "Sum", "Min", "Max", "Product", "ProcessSet", "global_process_set", "add_process_set",
           "remove_process_set", "EmbeddingBag", "EmbeddingBagCollection", "EmbeddingBagConfig",
           "EmbeddingCollection", "EmbeddingConfig", "JaggedTensor", "KeyedJaggedTensor", "KeyedTensor"]
