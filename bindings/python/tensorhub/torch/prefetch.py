"""Prefetcher: the next version lands in a spare set of tensors on a
background thread while the module keeps the current one."""

from __future__ import annotations

import threading
import time
from typing import Any

import torch

from .._common import LATEST, version_arg
from .._errors import Canceled, Closed, InvalidArgument, Timeout
from ..cancel import Cancel
from ..client import Client
from ._collect import Rename, Source, _bump_versions, _items, _synchronize, named_tensors
from ._fetcher import _digest_buffer, _Fetcher, _layout, _match, _Plan
from .digests import DIGEST_NAME


class _TensorSet:
    """One set of tensors a version lands in, with the fetcher serving it."""

    def __init__(self, fetcher: _Fetcher, tensors: dict[str, torch.Tensor] | None) -> None:
        self.fetcher = fetcher
        self.tensors = tensors  # by published name; None until first needed
        self.plan: _Plan | None = None


class Prefetcher:
    """Keeps a module in use, and served, at version v while version v+1
    lands in a spare set of tensors on a background thread; swap() then makes
    v+1 the module's. The reader's stall is the swap, not the fetch.

        prefetcher = Prefetcher(client, "policy", model)
        prefetcher.fetch(timeout=60)        # the first version
        while True:
            prefetcher.prefetch()           # background: wait for a newer version, fetch it
            generate(model)                 # meanwhile the module holds v and serves it
            prefetcher.swap()               # v+1 is the module's (waits if still fetching)

    Two ways to swap:

    - swap="pointer" (default): each of the module's tensors is pointed at its
      spare (``param.data = spare``); the storage it leaves becomes the spare
      set of the next prefetch, and keeps serving v until then. The stall is a
      loop over the tensors, about a microsecond each, whatever their size.
      The module's tensor objects stay the same, their addresses change: CUDA
      graphs captured on the old storage (and anything else holding it) do
      not follow. Memory: two copies of the module's tensors.
    - swap="copy": the spare set is copied into the module's own storage
      (torch._foreach_copy_); addresses never change. The stall is one copy of
      the model (memory bandwidth). The module's storage does not serve; the
      spare set serves the version until the next prefetch.

    The module is never written by the background fetch: an error of it (no
    such version, every holder gone, a layout the module cannot take, a digest
    mismatch) is raised by swap(), and the module still holds v.

    Args:
        target, shard, strict, buffers, rename, verify, serve: as Receiver.
        swap: "pointer" or "copy".
    """

    def __init__(self, client: Client, model: str, target: Source, *, shard: int = 0, swap: str = "pointer",
                 strict: bool = True, buffers: bool = True, rename: Rename | None = None, verify: bool = True,
                 serve: bool = True) -> None:
        if swap not in ("pointer", "copy"):
            raise InvalidArgument(-1, f"swap must be 'pointer' or 'copy', got {swap!r}")
        self._client = client
        self.model = model
        self._shard = shard
        self._mode = swap
        self._strict = strict
        self._local, self._aliases = named_tensors(target, buffers=buffers, rename=rename)
        if not self._local:
            raise InvalidArgument(-1, f"nothing to fetch into for '{model}': the {type(target).__name__} has no tensors")
        # Every tensor object of the module holding a published name (tied
        # weights may be distinct objects over one storage): a pointer swap
        # moves them all.
        self._objects: dict[str, list[torch.Tensor]] = {name: [t] for name, t in self._local}
        for local_name, t in _items(target, buffers):
            name = local_name if rename is None else rename(local_name)
            if name is not None and name in self._aliases:
                held = self._objects[self._aliases[name]]
                if not any(t is o for o in held):
                    held.append(t)
        what = f"the spare tensors of '{model}'"
        spare = _TensorSet(_Fetcher(client, model, shard, verify, serve, what), None)
        if swap == "pointer":
            # The module's own storage is the other set: detached views keep
            # it alive once the module points elsewhere.
            mine = _TensorSet(_Fetcher(client, model, shard, verify, serve, what),
                              {name: t.detach() for name, t in self._local})
            self._sets = [mine, spare]
            self._live: int | None = 0
        else:
            self._sets = [spare]
            self._live = None
        self._thread: threading.Thread | None = None
        self._target_set = 0
        self._outcome: tuple[int, int] | BaseException | None = None
        self._cancel = Cancel()  # the running prefetch's; a new one per prefetch()
        self.version: int | None = None
        """The version the module holds (None before the first swap)."""
        self.last_swap_s: float | None = None
        """How long the last swap() took once the version was there: the reader's stall."""
        self.last_fetch_s: float | None = None
        """How long the last background fetch took (waiting for the version not included)."""
        self.last_sync_stats: dict[str, Any] | None = None
        """The last background fetch's summary (Client.last_sync_stats of its thread)."""

    @property
    def pending(self) -> bool:
        """A prefetch was started and not swapped in yet."""
        return self._thread is not None

    @property
    def ready(self) -> bool:
        """A prefetch is done (fetched, or failed): swap() will not wait."""
        return self._thread is not None and not self._thread.is_alive()

    def prefetch(self, version: int = LATEST, *, wait: bool = True, wait_timeout: float | None = None,
                 timeout: float = 60.0) -> None:
        """Starts fetching into the spare set on a background thread and returns.

        Args:
            version: the version to fetch (default: the newest committed).
            wait: first wait for a version newer than the module's (the
                trainer's next one), up to wait_timeout seconds (None: until
                it comes or close()).
            timeout: deadline of the fetch itself, in seconds.

        Raises:
            InvalidArgument: a prefetch is already pending (swap it in first).
        """
        version_arg(version)
        if self._thread is not None:
            raise InvalidArgument(-1, f"a prefetch of '{self.model}' is already pending: swap() it in first")
        index = 0 if self._mode == "copy" else 1 - (self._live or 0)
        self._target_set = index
        self._outcome = None
        newer = (self.version or 0) if wait else None
        self._cancel = Cancel()  # close() ends the fetch it starts
        self._thread = threading.Thread(target=self._background, args=(index, version, newer, wait_timeout, timeout),
                                        name=f"tensorhub-prefetch-{self.model}", daemon=True)
        self._thread.start()

    def _background(self, index: int, version: int, newer: int | None, wait_timeout: float | None,
                    timeout: float) -> None:
        try:
            if newer is not None:
                self._wait_newer(newer, wait_timeout)
            started = time.perf_counter()
            tensor_set = self._sets[index]
            got = tensor_set.fetcher.run(version, timeout, lambda v, fresh: self._plan_for(index, v, fresh),
                                         lambda _: None, cancel=self._cancel)
            self.last_fetch_s = time.perf_counter() - started
            self.last_sync_stats = self._client.last_sync_stats
            self._outcome = (index, got)
        except BaseException as e:  # noqa: BLE001 - raised by swap()
            self._outcome = e

    def _wait_newer(self, newer: int, wait_timeout: float | None) -> None:
        try:
            self._client.wait_for_version(self.model, newer_than=newer, timeout=wait_timeout, cancel=self._cancel)
        except Canceled:
            raise Closed(Closed.code,
                         f"the prefetcher of '{self.model}' was closed while waiting for a version") from None

    def _plan_for(self, index: int, version: int, fresh: bool) -> _Plan:
        tensor_set = self._sets[index]
        if tensor_set.plan is not None and not fresh:
            return tensor_set.plan
        desc = self._client.describe(self.model, version, self._shard)
        # The module must be able to take the version: checked before any byte lands.
        _match(desc, self._local, self._aliases, self._strict,
               f"cannot prefetch version {desc['version']} of '{self.model}' shard {desc['shard']} for the module")
        layout = _layout(desc)
        if tensor_set.plan is not None and tensor_set.plan.layout == layout:
            return tensor_set.plan
        tensors = tensor_set.tensors
        if tensors is None:
            with torch.no_grad():
                tensors = {name: torch.empty_like(t, memory_format=torch.contiguous_format) for name, t in self._local}
            tensor_set.tensors = tensors
        digest = _digest_buffer(layout)
        pairs: list[tuple[str, torch.Tensor]] = []
        for name, _, _ in layout:
            if name == DIGEST_NAME:
                assert digest is not None
                pairs.append((name, digest))
            else:
                pairs.append((name, tensors[name]))
        tensor_set.plan = _Plan(layout, pairs, digest)
        return tensor_set.plan

    def swap(self, timeout: float | None = None) -> int:
        """Makes the prefetched version the module's, waiting for the
        background fetch if it is not done (up to `timeout` seconds, None:
        as long as it takes). Returns the version the module now holds.

        Raises:
            InvalidArgument: no prefetch was started.
            Timeout: the fetch is still running after `timeout` (it goes on;
                swap again later).
            Whatever the background fetch raised; the module is unchanged.
        """
        thread = self._thread
        if thread is None:
            raise InvalidArgument(-1, f"no prefetch of '{self.model}' to swap in: call prefetch() first")
        thread.join(timeout)
        if thread.is_alive():
            raise Timeout(Timeout.code, f"the prefetch of '{self.model}' is still running after {timeout} s")
        self._thread = None
        outcome, self._outcome = self._outcome, None
        if isinstance(outcome, BaseException):
            raise outcome
        assert outcome is not None
        index, got = outcome
        plan = self._sets[index].plan
        assert plan is not None
        started = time.perf_counter()
        with torch.no_grad():
            if self._mode == "pointer":
                for name, t in plan.pairs:
                    for obj in self._objects.get(name, ()):
                        obj.data = t
                self._live = index
            else:
                dst = [self._objects[n][0] for n, _ in plan.pairs if n != DIGEST_NAME]
                src = [t for n, t in plan.pairs if n != DIGEST_NAME]
                _synchronize(dst)
                if hasattr(torch, "_foreach_copy_"):
                    torch._foreach_copy_(dst, src)
                else:
                    for d, s in zip(dst, src):
                        d.copy_(s)
                _synchronize(dst)
                _bump_versions(dst)
        self.last_swap_s = time.perf_counter() - started
        self.version = got
        return got

    def fetch(self, version: int = LATEST, *, timeout: float = 60.0) -> int:
        """Fetches `version` into the spare set and swaps it in at once (the
        first version, or a reader that cannot overlap). Returns it."""
        self.prefetch(version, wait=False, timeout=timeout)
        return self.swap()

    def close(self) -> None:
        """Stops waiting for a version, cancels a fetch in flight (it ends
        within about 20 ms, and the reads it has in flight land or are
        closed), and stops serving both sets. Idempotent. The module keeps
        the tensors it points at."""
        self._cancel.cancel()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        for tensor_set in self._sets:
            tensor_set.fetcher.release()

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
