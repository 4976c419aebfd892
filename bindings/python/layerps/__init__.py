"""LayerPS: a parameter server for distributed training, from Python.

    import layerps
    w = layerps.init()                        # join the cluster layerps-launch started
    t = w.declare_dense("w", 1000, rule="sgd", lr=0.1)
    w.push(t, grad).wait()
    values = w.pull(t).wait()

See docs/python.md. PyTorch integration: ``import layerps.torch``.
"""

import os as _os

# The C++ core logs through glog, whose INFO lines (node registration, table placement...)
# are noise in a training script or a notebook: default to WARNING unless the caller
# chose (GLOG_minloglevel=0 shows everything). glog reads the variable when it loads, so
# it is set only around that import and the environment is left as it was.
_glog_default = "GLOG_minloglevel" not in _os.environ
if _glog_default:
    _os.environ["GLOG_minloglevel"] = "1"
try:
    from . import _core
finally:
    if _glog_default:
        del _os.environ["GLOG_minloglevel"]
from .errors import (  # noqa: F401
    AbortedError, AlreadyExistsError, FailedPreconditionError, InternalError,
    InvalidArgumentError, IoError, LayerPSError, NotFoundError, PermissionDeniedError,
    ProtocolError, ResourceExhaustedError, TimeoutError, UnavailableError,
)
from .cluster import (  # noqa: F401
    Handle, LocalCluster, Options, Scheduler, Server, Table, Worker, bin_dir,
    default_worker, init, make_options, shutdown, tool_path,
)

__version__ = "0.1.0"
