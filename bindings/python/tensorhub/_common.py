"""Owned C handles and argument conversions shared by Server and Client."""

from __future__ import annotations

import atexit
import math
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Protocol, Self

from ._errors import Closed, InvalidArgument
from ._lib import TH_LATEST

__all__ = ["Handle", "HandleOwner", "close_at_exit", "LATEST", "to_ms", "u32", "version_arg", "encode"]

LATEST: int = TH_LATEST
"""Pass as a version to mean the newest committed one (TH_LATEST)."""

_U32_MAX = 2**32 - 1


class HandleOwner:
    """What Server and Client share: the URL they serve or use, their Handle,
    and closing (close(), a `with` block, or garbage collection)."""

    _url: str
    _handle: Handle

    @property
    def url(self) -> str:
        """The server's URL: where clients connect (with the real port)."""
        return self._url

    @property
    def closed(self) -> bool:
        """Whether close() was called."""
        return not self._handle.is_open

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_handle", None) is not None:
            self.close()


class Handle:
    """A C pointer that close() destroys once no call is using it.

    The C API lets calls on a client run concurrently from any thread but
    forbids destroying it while one runs; Python code cannot promise that, so
    every call holds the handle through use(), and close() marks it closed
    (new calls raise Closed) and waits for the calls in flight to return.
    """

    _OPEN, _CLOSING, _CLOSED = range(3)

    def __init__(self, ptr: int, destroy: Callable[[int], None], what: str) -> None:
        self._ptr = ptr
        self._destroy = destroy
        self._what = what
        self._cond = threading.Condition()
        self._inflight = 0
        self._state = self._OPEN
        # UCX and NNG state does not survive fork(): a forked child must not
        # tear down its parent's client or server, only forget it.
        self._pid = os.getpid()

    @property
    def is_open(self) -> bool:
        return self._state == self._OPEN

    @contextmanager
    def use(self) -> Iterator[int]:
        """The pointer, guaranteed not to be destroyed until the block ends."""
        with self._cond:
            if self._state != self._OPEN:
                raise Closed(-11, f"the {self._what} is closed")
            self._inflight += 1
        try:
            yield self._ptr
        finally:
            with self._cond:
                self._inflight -= 1
                if self._inflight == 0:
                    self._cond.notify_all()

    def close(self, after_destroy: Callable[[], None] | None = None) -> bool:
        """Destroys the handle after the calls in flight; False if it was already closing.

        `after_destroy()` runs right after the destroy function, while no
        call can run; not in a forked child, which destroys nothing."""
        with self._cond:
            if self._state != self._OPEN:
                return False
            self._state = self._CLOSING
            while self._inflight:
                self._cond.wait()
        try:
            if os.getpid() == self._pid:
                self._destroy(self._ptr)
                if after_destroy is not None:
                    after_destroy()
        finally:
            with self._cond:
                self._state = self._CLOSED
                self._ptr = 0
        return True


class _Closeable(Protocol):
    def close(self) -> None: ...


class _Registry:
    """Closes what is still open at interpreter exit, clients before servers,
    so that no library thread outlives the interpreter's teardown."""

    def __init__(self) -> None:
        self._live: weakref.WeakKeyDictionary[_Closeable, int] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        atexit.register(self.close_all)

    def add(self, owner: _Closeable, order: int) -> None:
        with self._lock:
            self._live[owner] = order

    def close_all(self) -> None:
        with self._lock:
            owners = sorted(self._live.items(), key=lambda item: item[1])
        for owner, _ in owners:
            owner.close()


_registry = _Registry()


def close_at_exit(owner: _Closeable, order: int) -> None:
    """Registers `owner` (held weakly) to be closed at interpreter exit, lower `order` first."""
    _registry.add(owner, order)


def _unsigned(value: int, what: str, top: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= top:
        raise InvalidArgument(-1, f"{what} must be an integer in [0, {top}], got {value!r}")
    return value


def u32(value: int, what: str) -> int:
    """An int that must fit a uint32_t field."""
    return _unsigned(value, what, _U32_MAX)


def u64(value: int, what: str) -> int:
    """An int that must fit a uint64_t field."""
    return _unsigned(value, what, 2**64 - 1)


def to_ms(seconds: float, what: str, *, minimum: int = 0) -> int:
    """Seconds (float) to whole milliseconds for a uint32_t *_ms field, rounding up
    so that a small positive timeout never becomes 0 (which often means 'default')."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or math.isnan(seconds) or seconds < 0:
        raise InvalidArgument(-1, f"{what} must be a non-negative number of seconds, got {seconds!r}")
    ms = math.ceil(seconds * 1000)
    if not minimum <= ms <= _U32_MAX:
        raise InvalidArgument(-1, f"{what} must be between {minimum / 1000} and {_U32_MAX / 1000} seconds, "
                              f"got {seconds!r}")
    return ms


def version_arg(version: int, what: str = "version") -> int:
    """A version number or LATEST, as a uint64_t."""
    if not isinstance(version, int) or isinstance(version, bool) or not 0 <= version <= LATEST:
        raise InvalidArgument(-1, f"{what} must be an integer in [0, 2**64 - 1] or tensorhub.LATEST, got {version!r}")
    return version


def encode(text: str, what: str) -> bytes:
    """A str argument as the NUL-terminated UTF-8 the C API copies."""
    if not isinstance(text, str):
        raise InvalidArgument(-1, f"{what} must be a str, got {type(text).__name__}")
    data = text.encode("utf-8")
    if b"\0" in data:
        raise InvalidArgument(-1, f"{what} contains a NUL character")
    return data
