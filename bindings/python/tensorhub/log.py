"""The library's log (th_set_log_handler, th_set_log_level).

Lines go to stderr unless a handler is set: ``set_log_handler(to_logging)``
sends them to Python's ``logging`` (logger "tensorhub"). UCX's own warnings
and errors come through the same log, at "info", as "ucx: ...".
"""

from __future__ import annotations

import atexit
import logging
import threading
from typing import Callable, Literal

from ._errors import check
from ._lib import LogFn, lib

LogLevel = Literal["error", "warn", "info", "debug"]
LogHandler = Callable[[LogLevel, str], None]
"""handler(level, message): called on whichever library thread logs."""

_LEVELS: tuple[LogLevel, ...] = ("error", "warn", "info", "debug")
_TO_LOGGING = {"error": logging.ERROR, "warn": logging.WARNING, "info": logging.INFO, "debug": logging.DEBUG}

_lock = threading.Lock()
_installed: object | None = None  # the C function pointer the library holds: kept alive while it does


def set_log_handler(handler: LogHandler | None) -> None:
    """Sends every log line of the process's tensorhub clients and servers
    to handler(level, message) instead of stderr; None sends them to stderr
    again. The handler runs on library threads, possibly several at once,
    and must not call into tensorhub. An exception it raises is printed and
    dropped. Returns once no call to the previous handler is running.
    At interpreter exit the handler is removed (lines logged then go to
    stderr)."""
    global _installed
    if handler is not None and not callable(handler):
        raise TypeError(f"handler must be callable or None, not {type(handler).__name__}")

    def trampoline(level: int, message: bytes | None, _user: object) -> None:
        name = _LEVELS[level] if 0 <= level < len(_LEVELS) else "debug"
        handler(name, (message or b"").decode("utf-8", "replace"))  # type: ignore[misc]

    with _lock:
        fn = LogFn(trampoline) if handler is not None else LogFn()  # LogFn(): NULL
        lib.th_set_log_handler(fn, None)
        _installed = fn  # the previous one is no longer called: it may go


def to_logging(level: LogLevel, message: str) -> None:
    """A handler for set_log_handler: the line goes to the "tensorhub"
    logger of Python's logging, at the matching level."""
    logging.getLogger("tensorhub").log(_TO_LOGGING.get(level, logging.DEBUG), "%s", message)


def set_log_level(level: LogLevel) -> None:
    """Lines above level ("error", "warn", "info", "debug") are not logged.
    The initial level is $TENSORHUB_LOG_LEVEL's, else "warn"."""
    if level not in _LEVELS:
        raise ValueError(f"log level must be one of {', '.join(_LEVELS)}, not {level!r}")
    check(lib.th_set_log_level(_LEVELS.index(level)))


def log_level() -> LogLevel:
    """The level in force."""
    raw = lib.th_get_log_level()
    return _LEVELS[raw] if 0 <= raw < len(_LEVELS) else "debug"


@atexit.register
def _restore_stderr() -> None:
    # A library thread must not call into an interpreter that is going away.
    if _installed:  # a NULL LogFn is false
        set_log_handler(None)
