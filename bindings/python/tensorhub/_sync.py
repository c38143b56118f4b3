"""Per-call summaries (th_sync_stats) and fetch progress callbacks."""

from __future__ import annotations

import ctypes
from typing import Any, Callable, Optional

from ._errors import check
from ._lib import ProgressFn, SyncStats, lib, new_config
from .cancel import Cancel

__all__ = ["ProgressCallback", "new_stats", "stats_dict", "stats_pointer", "ProgressHook"]

ProgressCallback = Callable[[int, int], Any]
"""progress(bytes_done, bytes_total), called on the fetching thread."""


def new_stats() -> SyncStats:
    return new_config(SyncStats, lib.th_sync_stats_init)


def stats_dict(op: str, model: str, shard: int, s: SyncStats) -> dict[str, Any]:
    """A th_sync_stats as a plain dict, ready for wandb.log / mlflow.log_metrics."""
    return {
        "op": op, "model": model, "shard": shard, "version": int(s.version), "bytes": int(s.bytes),
        "seconds": float(s.seconds), "gbps": float(s.gbps), "sources": int(s.sources),
        "replans": int(s.replans), "failed_sources": int(s.failed_sources), "chunks": int(s.chunks),
        "bytes_from_publisher": int(s.bytes_from_publisher), "bytes_from_replicas": int(s.bytes_from_replicas),
        "checksum_mismatches": int(s.checksum_mismatches), "bytes_one_sided": int(s.bytes_one_sided),
        "bytes_waited": int(s.bytes_waited), "bytes_kept": int(s.bytes_kept),
        "server_seconds": float(s.server_seconds),
    }


class ProgressHook:
    """Wraps a Python progress callback as the C function pointer th_fetch
    calls, and sets a th_fetch_config's progress and cancel fields (install).
    Keep the hook alive for the whole th_fetch call. An exception in the
    callback never crosses into C: it is kept, the callback is not called
    again, the fetch is canceled (through a token linked to the caller's),
    and check() raises it, instead of Canceled, once the fetch has
    returned."""

    def __init__(self, callback: Optional[ProgressCallback], interval_ms: Optional[int] = None) -> None:
        self._callback = callback
        self.interval_ms = interval_ms  # None: the library's default (100 ms)
        self.error: Optional[BaseException] = None
        self.c_function = ProgressFn(self._call) if callback is not None else ProgressFn()
        self._stop: Optional[Cancel] = None

    def install(self, cfg: Any, cancel: Optional[Cancel]) -> None:
        """Points cfg (a th_fetch_config) at the callback and at a token that
        ends with `cancel` or with an exception in the callback."""
        if self._callback is None:
            cfg.cancel = None if cancel is None else cancel._pointer
            return
        self._stop = Cancel(parent=cancel)
        cfg.cancel = self._stop._pointer
        cfg.progress = self.c_function
        if self.interval_ms is not None:
            cfg.progress_interval_ms = self.interval_ms

    def _call(self, done: int, total: int, _user_data: Optional[int]) -> None:
        if self.error is not None or self._callback is None:
            return
        try:
            self._callback(int(done), int(total))
        except BaseException as e:  # noqa: BLE001 - re-raised by check / raise_if_failed
            self.error = e
            if self._stop is not None:
                self._stop.cancel()

    def check(self, status: int) -> None:
        """check(status) of the fetch, but what the callback raised instead
        of the error the fetch ended with (Canceled, if the callback ended
        it), which becomes its __context__."""
        try:
            check(status)
        except BaseException:
            self.raise_if_failed()
            raise

    def raise_if_failed(self) -> None:
        if self.error is not None:
            error, self.error = self.error, None
            raise error


def stats_pointer(stats: SyncStats) -> Any:
    return ctypes.pointer(stats)
