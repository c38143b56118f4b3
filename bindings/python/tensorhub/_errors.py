"""Exceptions: one class per th_status code, all deriving from TensorHubError."""

from __future__ import annotations

from ._lib import lib

__all__ = [
    "TensorHubError", "InvalidArgument", "VersionNotFound", "NotCommitted", "LayoutMismatch", "Conflict",
    "Timeout", "Unavailable", "TransportError", "ProtocolError", "OutOfMemory", "Closed", "Unsupported",
    "InternalError", "Retained", "AuthError", "check", "error_for",
]


class TensorHubError(Exception):
    """A tensorhub call failed.

    Attributes:
        code: the th_status code (a negative int, e.g. -2 for TH_ERR_NOT_FOUND).
        message: what th_last_error() said right after the failing call.
    """

    code: int = 0

    def __init__(self, code: int, message: str) -> None:
        # args stay (code, message) so that exceptions pickle across processes.
        super().__init__(code, message)
        self.code = code
        self.message = message

    @property
    def status_name(self) -> str:
        """The library's short name for the code, e.g. "not found"."""
        return str(lib.th_status_str(self.code).decode())

    def __str__(self) -> str:
        return f"{self.message} ({self.status_name}, code {self.code})" if self.message else self.status_name


class InvalidArgument(TensorHubError, ValueError):
    """TH_ERR_INVALID_ARG: a bad argument (also raised by the binding itself)."""


class VersionNotFound(TensorHubError, LookupError):
    """TH_ERR_NOT_FOUND: unknown model, version, shard or tensor."""


class NotCommitted(TensorHubError):
    """TH_ERR_NOT_COMMITTED: the version exists but not every shard is published."""


class LayoutMismatch(TensorHubError):
    """TH_ERR_LAYOUT_MISMATCH: the buffers do not match the published layout."""


class Conflict(TensorHubError):
    """TH_ERR_CONFLICT: a publish disagrees with what is already published."""


class Timeout(TensorHubError, TimeoutError):
    """TH_ERR_TIMEOUT: the deadline passed."""


class Unavailable(TensorHubError):
    """TH_ERR_UNAVAILABLE: the server is unreachable, or no live worker holds the data."""


class TransportError(TensorHubError):
    """TH_ERR_TRANSPORT: a data-plane (UCX) failure."""


class ProtocolError(TensorHubError):
    """TH_ERR_PROTOCOL: a malformed or unexpected message."""


class OutOfMemory(TensorHubError, MemoryError):
    """TH_ERR_NO_MEMORY: an allocation failed."""


class Closed(TensorHubError):
    """TH_ERR_CLOSED: the handle is shutting down or was closed."""


class Unsupported(TensorHubError, NotImplementedError):
    """TH_ERR_UNSUPPORTED: not built into this library (e.g. CUDA memory without CUDA)."""


class InternalError(TensorHubError):
    """TH_ERR_INTERNAL: a bug in tensorhub."""


class Retained(TensorHubError):
    """TH_ERR_RETAINED: the last complete copy of a required version cannot be given up."""


class AuthError(TensorHubError, PermissionError):
    """TH_ERR_AUTH: the peers do not share the same cluster token."""


class Canceled(TensorHubError):
    """TH_ERR_CANCELED: the caller canceled it (Cancel.cancel())."""


_BY_CODE: dict[int, type[TensorHubError]] = {
    -1: InvalidArgument,
    -2: VersionNotFound,
    -3: NotCommitted,
    -4: LayoutMismatch,
    -5: Conflict,
    -6: Timeout,
    -7: Unavailable,
    -8: TransportError,
    -9: ProtocolError,
    -10: OutOfMemory,
    -11: Closed,
    -12: Unsupported,
    -13: InternalError,
    -14: Retained,
    -15: AuthError,
    -16: Canceled,
}
for _code, _cls in _BY_CODE.items():
    _cls.code = _code


def error_for(code: int, message: str) -> TensorHubError:
    """The exception for a status code; codes newer than this binding get the base class."""
    return _BY_CODE.get(code, TensorHubError)(code, message)


def check(status: int) -> None:
    """Raises the exception for a non-zero status.

    Must be called on the thread that made the failing call, before any other
    tensorhub call: th_last_error() is thread-local and overwritten by the next
    call. ctypes runs the C function on the calling thread, so calling this
    right after it is enough.
    """
    if status != 0:
        raise error_for(status, lib.th_last_error().decode("utf-8", "replace"))
