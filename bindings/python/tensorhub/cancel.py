"""Cancel tokens (th_cancel): end fetches from another thread."""

from __future__ import annotations

import ctypes

from ._errors import check
from ._lib import lib


class Cancel:
    """A token that ends the fetches it is given to (``cancel=``) with
    Canceled once cancel() is called, from any thread: for a reader that
    shuts down, is preempted, or no longer wants the version it is fetching.

    A fetch looks at it between transfers (at once if it was canceled
    before; else within about 20 ms once its reads have started) and, once
    its reads in flight have landed or been closed, raises Canceled; nothing
    writes to its destination after that. A token stays canceled: make a new
    one for the next fetch. One token may be given to several fetches.

    Cancel(parent=token) makes a token that is canceled too when `parent`
    is, while canceling it leaves `parent` alone: for one fetch among the
    several a shutdown token ends.
    """

    def __init__(self, parent: Cancel | None = None) -> None:
        out = ctypes.c_void_p()
        check(lib.th_cancel_create_linked(None if parent is None else parent._pointer, ctypes.byref(out)))
        self._ptr: int | None = out.value

    def cancel(self) -> None:
        """Cancels the fetches it was given to. Idempotent; never blocks."""
        lib.th_cancel_signal(self._ptr)

    @property
    def canceled(self) -> bool:
        """Whether cancel() was called, on it or on its parent."""
        return bool(lib.th_cancel_signalled(self._ptr))

    @property
    def _pointer(self) -> int | None:
        # For th_fetch_config.cancel: the caller keeps this object alive
        # through the call, and so the token.
        return self._ptr

    def __repr__(self) -> str:
        return f"Cancel(canceled={self.canceled})"

    def __del__(self) -> None:
        ptr, self._ptr = getattr(self, "_ptr", None), None
        if ptr:
            lib.th_cancel_destroy(ptr)
