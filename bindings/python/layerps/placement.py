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

* :class:`LayerwiseTrainer` (``_layerwise.py``) executes any of OptCNN's layer-wise
  strategies (``layerps-plan --strategy=optcnn --json``): every layer in its own sample,
  channel, height and width split, the boxes between layers exchanged with ``alltoall``
  and each weight shard all-reduced among its replicas.

* :func:`plan`, :func:`probe` and :func:`runner` (layerps/autoplan.py): every strategy
  predicted for a model, the fastest chosen, and a trainer that runs it.

This module gathers them; the code lives in ``_profile.py``, ``_split.py`` and
``autoplan.py``. Every call of a trainer is collective over the worker ranks it names, in
the same order.
"""

from ._profile import profile
from ._layerwise import LayerwiseTrainer
from ._split import SplitTrainer, split_model, split_sequential
from .autoplan import plan, probe, runner  # the automatic plan (layerps/autoplan.py)

__all__ = ["profile", "split_sequential", "split_model", "SplitTrainer", "LayerwiseTrainer", "plan", "probe", "runner"]
