"""Receiver: fetches versions straight into a module's parameter storage."""

from __future__ import annotations

import time
from typing import Any

import torch

from .._common import LATEST
from .._sync import ProgressCallback
from ..cancel import Cancel
from ..client import Client
from ._collect import Rename, Source, _bump_versions, _Collector, _synchronize
from ._fetcher import _Fetcher, _match, _Plan, _still_valid
from .digests import DIGEST_NAME
from .staging import Staging


class Receiver:
    """Fetches versions straight into a module's parameter storage.

    Before the first fetch (and whenever the layout changes) the published
    names, dtypes and shapes are matched against the module's state_dict by
    name; any difference raises LayoutMismatch naming the tensors, and nothing
    is written. Then the bytes land in place (the parameters keep their
    storage, so CUDA graphs and optimizers that hold them stay valid), and the
    module serves the version to other readers until the next fetch or close().

    A fetch that fails after bytes started to land (every holder died, the
    deadline passed) leaves the module holding parts of two versions: the
    exception says so and `version` becomes None. If that must never happen,
    pass staging="cpu" (or a device): the version lands in Staging buffers
    first, is verified, and is then copied into the parameters.

    Args:
        target: the module (its state_dict) or a name -> tensor mapping to fill.
        strict: every local tensor must be in the version (like load_state_dict);
            with strict=False, local tensors the version lacks are left alone.
            A published tensor the module lacks is always an error.
        buffers, rename: as Publisher; `rename` maps local names to published ones.
        verify: check the publisher's digests when the version carries them.
        serve: serve each fetched version to other readers.
        staging: None (fetch in place) or a device for Staging buffers.
    """

    def __init__(self, client: Client, model: str, target: Source, *, shard: int = 0, strict: bool = True,
                 buffers: bool = True, rename: Rename | None = None, verify: bool = True, serve: bool = True,
                 staging: str | torch.device | None = None) -> None:
        self._client = client
        self.model = model
        self._target = target
        self._shard = shard
        self._strict, self._buffers, self._rename = strict, buffers, rename
        self._plan: _Plan | None = None
        self._plan_generation = -1
        self._collector = _Collector(target, buffers, rename)
        self._fetcher = _Fetcher(client, model, shard, verify, serve and staging is None,
                                 f"the {type(target).__name__}'s tensors")
        self._staging = None if staging is None else Staging(client, model, shard=shard, device=staging,
                                                             verify=verify, serve=serve)
        self.version: int | None = None
        """The version the module holds (None before the first fetch, or after one that failed midway)."""

    def fetch(self, version: int = LATEST, *, timeout: float = 60.0, progress: ProgressCallback | None = None,
              progress_interval: float | None = None, cancel: Cancel | None = None) -> int:
        """Fetches `version` (default: the newest committed) into the module.
        `progress`, `progress_interval` and `cancel` are as Client.fetch's
        (canceled, the module may hold parts of two versions, unless it
        fetches through staging buffers).

        Returns:
            The version now in the module.

        Raises:
            LayoutMismatch: names, dtypes or shapes differ (the message lists
                them); nothing was written.
            InvalidArgument: a local tensor cannot be fetched into (not
                contiguous, not CPU/CUDA, overlapping); nothing was written.
            DigestMismatch: the bytes are not the ones the publisher digested.
            VersionNotFound, NotCommitted; and Unavailable, Timeout,
            TransportError, Canceled, which say whether the module was partly
            overwritten.
        """
        if self._staging is not None:
            return self._fetch_staged(version, timeout, progress, progress_interval, cancel)
        try:
            return self._fetcher.run(version, timeout, self._plan_for, self._done, progress, progress_interval,
                                     cancel=cancel)
        finally:
            # Unchanged when the fetch failed before writing (no such version,
            # a layout mismatch); None once bytes may have landed.
            self.version = self._fetcher.version

    def update(self, *, timeout: float = 60.0, cancel: Cancel | None = None) -> int:
        """Waits for a version newer than the one held (any, if none is) and
        fetches the newest. Returns it. `cancel` ends the wait or the fetch."""
        deadline = time.monotonic() + timeout
        self._client.wait_for_version(self.model, newer_than=self.version or 0, timeout=timeout, cancel=cancel)
        return self.fetch(LATEST, timeout=max(0.001, deadline - time.monotonic()), cancel=cancel)

    def _local(self) -> tuple[list[tuple[str, torch.Tensor]], dict[str, str]]:
        return self._collector.collect()

    def _plan_for(self, version: int, fresh: bool) -> _Plan:
        local, aliases = self._local()
        if self._plan is not None and not fresh and (self._plan_generation == self._collector.generation or
                                                     _still_valid(self._plan, local, self._strict)):
            self._plan_generation = self._collector.generation
            return self._plan
        desc = self._client.describe(self.model, version, self._shard)
        self._plan = _match(desc, local, aliases, self._strict, f"cannot fetch {self._describe(desc)}")
        self._plan_generation = self._collector.generation
        return self._plan

    def _describe(self, desc: dict[str, Any]) -> str:
        return f"version {desc['version']} of '{self.model}' shard {desc['shard']} into the {type(self._target).__name__}"

    def _done(self, plan: _Plan) -> None:
        tensors = [t for n, t in plan.pairs if n != DIGEST_NAME]
        _synchronize(tensors)
        _bump_versions(tensors)

    def _fetch_staged(self, version: int, timeout: float, progress: ProgressCallback | None,
                      progress_interval: float | None, cancel: Cancel | None) -> int:
        assert self._staging is not None
        deadline = time.monotonic() + timeout
        local, aliases = self._local()
        plan = self._plan
        if plan is None or not (self._plan_generation == self._collector.generation or
                                _still_valid(plan, local, self._strict)):
            # Check the module against the version before fetching: a
            # mismatch costs no fetch, and leaves the module untouched.
            desc = self._client.describe(self.model, version, self._shard)
            plan = _match(desc, local, aliases, self._strict, f"cannot fetch {self._describe(desc)}")
        weights = self._staging.fetch(version, timeout=max(0.001, deadline - time.monotonic()), progress=progress,
                                      progress_interval=progress_interval, cancel=cancel)
        if weights._layout != plan.layout:  # the version fetched has another layout: check it again
            desc = self._client.describe(self.model, weights.version, self._shard)
            plan = _match(desc, local, aliases, self._strict, f"cannot fetch {self._describe(desc)}")
        self._plan, self._plan_generation = plan, self._collector.generation
        dst = [t for n, t in plan.pairs if n != DIGEST_NAME]
        src = [t for _, t in weights]  # the same names, in the same (published) order
        _synchronize(dst)
        with torch.no_grad():
            if hasattr(torch, "_foreach_copy_"):
                torch._foreach_copy_(dst, src)
            else:
                for d, t in zip(dst, src):
                    d.copy_(t)
        self._done(plan)
        self.version = weights.version
        return weights.version

    def stop_serving(self) -> None:
        """Stops serving the module's memory, so that it may be modified."""
        self._fetcher.release()
        if self._staging is not None:
            self._staging.release()

    def close(self) -> None:
        """Stops serving. A fetch in flight on another thread ends first: it
        raises Canceled there. Idempotent."""
        self._fetcher.cancel_running()
        self._fetcher.release()
        if self._staging is not None:
            self._staging.close()  # ends its fetch too, stops serving, drops its buffers

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
