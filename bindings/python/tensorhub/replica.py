"""Replicas: versions this process holds in its own memory and serves to others."""

from __future__ import annotations

import threading
from types import TracebackType
from typing import TYPE_CHECKING

from ._errors import Closed, Retained, check
from ._lib import lib
from ._tensors import View

if TYPE_CHECKING:
    from .client import Client

__all__ = ["Replica"]


class Replica:
    """One shard of one version, held in caller memory and served to readers
    until released. Returned by Client.publish and Client.fetch_replica.

    The replica keeps references to the arrays it is served from, so they stay
    alive until release(); the caller must not modify them before release()
    (or begin_mutation()). Use it as a context manager to release on exit.
    A replica that is never released is withdrawn when its client closes
    (without the retention policy: see Client.close).
    """

    def __init__(self, client: Client, ptr: int, model: str, shard: int, views: list[View]) -> None:
        self._client = client
        self._ptr: int | None = ptr
        self._views = views
        self._lock = threading.Lock()  # one C call on this replica at a time
        self.model: str = model
        """The model name."""
        self.shard: int = shard
        """The shard index."""
        self.version: int = int(lib.th_replica_version(ptr))
        """The version held."""

    @property
    def released(self) -> bool:
        """Whether release() was called (or the client closed)."""
        return self._ptr is None

    @property
    def withdrawn(self) -> bool:
        """Whether the client withdrew this replica because its bytes no
        longer match its version's checksums (a reader reported chunks of it
        and the client, checking its own copy, found them changed). Nobody
        reads from it any more, and its buffers do not hold that version."""
        with self._lock:
            return self._ptr is not None and bool(lib.th_replica_withdrawn(self._ptr))

    def tensors(self) -> dict[str, object]:
        """The arrays/tensors the replica is served from, by name (empty once released)."""
        return {v.name: v.owner for v in self._views}

    def release(self) -> None:
        """Withdraws the replica: the server stops routing reads to it and
        readers still reading it re-read elsewhere. Afterwards the buffers may
        be overwritten. Idempotent.

        Raises:
            Retained: this is the last complete copy of a required version and
                the client's retention policy is "fail"; nothing changed.
            TensorHubError: telling the server failed; the replica is released anyway.
        """
        with self._lock:
            ptr = self._ptr
            if ptr is None:
                return
            try:
                with self._client._handle.use():
                    status = lib.th_replica_release(ptr)
                    if status == Retained.code:
                        check(status)  # nothing changed: the handle stays valid
                    self._ptr = None
                    self._client._forget(self)
                    self._views = []
                    check(status)
            except Closed:
                # The client is closing: destroying it withdraws every
                # replica, and it frees their handles (_free_after_close).
                return

    def begin_mutation(self) -> None:
        """Prepares to overwrite the buffers in place (an optimizer step).

        The server stops routing new reads here; if this is the last complete
        copy of a required version, the client's retention policy applies
        (spill a copy, wait, or raise Retained); reads in flight drain (up to
        the client's mutation_wait). After it returns the buffers may be
        overwritten; release() completes the mutation. Call it at most once.
        """
        with self._lock:
            if self._ptr is None:
                raise Closed(-11, f"replica of '{self.model}' version {self.version} was released")
            with self._client._handle.use():
                check(lib.th_replica_begin_mutation(self._ptr))

    def _free_after_close(self) -> None:
        """Frees the handle once its client was destroyed (which withdrew the
        replica); no other call on it can run then."""
        with self._lock:
            if self._ptr is not None:
                lib.th_replica_release(self._ptr)
                self._ptr = None
            self._views = []

    def _overlaps(self, views: list[View]) -> bool:
        """Whether any of `views` shares memory with this replica's buffers."""
        mine = [v.span() for v in self._views]
        return any(a[0] == b[0] and a[1] < b[2] and b[1] < a[2] for a in mine for b in (v.span() for v in views))

    def __enter__(self) -> Replica:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()

    def __repr__(self) -> str:
        state = " released" if self.released else ""
        return f"<tensorhub.Replica '{self.model}' version {self.version} shard {self.shard}{state}>"
