"""LayerPS: a parameter server for distributed training, from Python.

    import layerps
    w = layerps.init()                        # join the cluster layerps-launch started
    t = w.declare_dense("w", 1000, rule="sgd", lr=0.1)
    w.push(t, grad).wait()
    values = w.pull(t).wait()

See docs/python.md. PyTorch integration: ``import layerps.torch``.
"""

import os as _os

from . import _core

# The C++ core logs through glog, whose INFO lines (node registration, table placement...)
# are noise in a training script or a notebook: WARNING and above unless the caller chose
# (LAYERPS_LOG_LEVEL=INFO or GLOG_minloglevel=0 shows everything). Set here rather than
# through glog's variable, which glog reads only when it is first loaded (torch may have
# loaded it before us).
if "LAYERPS_LOG_LEVEL" not in _os.environ and "GLOG_minloglevel" not in _os.environ:
    _core.set_log_level(1)
from .errors import (  # noqa: F401
    AbortedError, AlreadyExistsError, FailedPreconditionError, InternalError,
    InvalidArgumentError, IoError, LayerPSError, NotFoundError, PermissionDeniedError,
    ProtocolError, ResourceExhaustedError, TimeoutError, UnavailableError,
)
from .cluster import (  # noqa: F401
    Handle, LocalCluster, Options, Scheduler, Server, Table, Worker, bin_dir,
    default_worker, init, launcher, make_options, shutdown, tool_path,
)

# One source for the version: the C++ library's (the CMake project() version); the wheel's
# metadata reads the same line (pyproject.toml). __commit__: the git commit it was built from.
__version__ = _core.__version__
__commit__ = _core.__commit__
