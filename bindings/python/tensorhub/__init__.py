"""tensorhub: move LLM weights between the processes of an RL job.

A metadata server tracks which workers hold each weight version in memory;
readers pull the bytes directly from holders and become holders themselves.

    import numpy as np, tensorhub

    with tensorhub.Server() as server, tensorhub.Client(server.url) as trainer, \\
            tensorhub.Client(server.url) as rollout:
        weights = {"w": np.arange(1024, dtype=np.float32)}
        trainer.publish("policy", 1, weights)          # served from `weights`, no copy
        mine = {"w": np.empty(1024, np.float32)}
        version = rollout.fetch("policy", into=mine)   # newest committed version

This package is a ctypes binding of libtensorhub (include/tensorhub/tensorhub.h).
"""

from ._common import LATEST
from ._errors import (
    AuthError,
    Canceled,
    Closed,
    Conflict,
    InternalError,
    InvalidArgument,
    LayoutMismatch,
    NotCommitted,
    OutOfMemory,
    ProtocolError,
    Retained,
    TensorHubError,
    Timeout,
    TransportError,
    Unavailable,
    Unsupported,
    VersionNotFound,
)
from ._lib import lib as _clib
from ._ranges import Range
from ._tensors import DType, MemKind, Typed, with_dtype
from .cancel import Cancel
from .client import Client
from .log import log_level, set_log_handler, set_log_level, to_logging
from .replica import Replica
from .server import Server, server_status

__version__: str = _clib.th_version().decode()
"""The version of the loaded libtensorhub ("MAJOR.MINOR.PATCH")."""

__all__ = [
    "LATEST", "Client", "Server", "Replica", "Range", "server_status", "DType", "MemKind", "Typed", "with_dtype",
    "TensorHubError", "InvalidArgument", "VersionNotFound", "NotCommitted", "LayoutMismatch", "Conflict",
    "Timeout", "Unavailable", "TransportError", "ProtocolError", "OutOfMemory", "Closed", "Unsupported",
    "InternalError", "Retained", "AuthError", "Canceled", "Cancel", "set_log_handler", "set_log_level",
    "log_level", "to_logging", "__version__",
]
