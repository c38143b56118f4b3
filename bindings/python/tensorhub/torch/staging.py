"""Staging: buffers a version lands in, complete and verified, before an
engine loads it from (name, tensor) pairs; Weights: those pairs."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from .._common import LATEST
from .._sync import ProgressCallback
from .._tensors import DType, torch_dtype
from ..cancel import Cancel
from ..client import Client
from ._fetcher import _digest_buffer, _Fetcher, _layout, _Plan
from .digests import DIGEST_NAME


class Weights:
    """A fetched version as (name, tensor) pairs, in published order: iterate
    it (as often as needed) or index it by name. The tensors are a Staging's
    buffers: valid until its next fetch; copy what must outlive that."""

    def __init__(self, version: int, pairs: list[tuple[str, torch.Tensor]],
                 layout: tuple[tuple[str, int, tuple[int, ...]], ...]) -> None:
        self.version = version
        """The version these tensors hold."""
        self._pairs = pairs
        self._layout = layout

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        return iter(self._pairs)

    def __len__(self) -> int:
        return len(self._pairs)

    def __getitem__(self, name: str) -> torch.Tensor:
        for n, t in self._pairs:
            if n == name:
                return t
        raise KeyError(name)

    def names(self) -> list[str]:
        return [n for n, _ in self._pairs]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for _, t in self._pairs)

    def __repr__(self) -> str:
        return f"<tensorhub.torch.Weights version {self.version}: {len(self._pairs)} tensors, {self.nbytes} bytes>"


class Staging:
    """Buffers a version lands in, complete and verified, before an engine
    loads it from (name, tensor) pairs:

        staging = Staging(client, "policy", device="cpu")
        weights = staging.fetch(timeout=60)       # the whole version, checked
        model.load_weights(weights)               # vLLM / SGLang load path

    The buffers are allocated from the published layout and reused while it
    stays the same; with serve=True they serve the version to other readers
    until the next fetch. A failed fetch never reaches the engine: fetch()
    raises before it returns any pair.
    """

    def __init__(self, client: Client, model: str, *, shard: int = 0, device: str | torch.device = "cpu",
                 pin_memory: bool = False, verify: bool = True, serve: bool = True) -> None:
        self._client = client
        self.model = model
        self._shard = shard
        self._device = torch.device(device)
        self._pin = pin_memory
        self._plan: _Plan | None = None
        self._fetcher = _Fetcher(client, model, shard, verify, serve, f"the staging buffers of '{model}'")
        self._weights: Weights | None = None

    @property
    def version(self) -> int | None:
        """The version the buffers hold (None before a fetch, or after one that failed)."""
        return self._fetcher.version

    def fetch(self, version: int = LATEST, *, timeout: float = 60.0, progress: ProgressCallback | None = None,
              progress_interval: float | None = None, cancel: Cancel | None = None) -> Weights:
        """Fetches `version` (default: the newest committed) into the buffers.
        `progress`, `progress_interval` and `cancel` are as Client.fetch's.

        Raises:
            DigestMismatch, VersionNotFound, NotCommitted, Unavailable,
            Timeout, TransportError, Canceled.
        """
        self._weights = None
        got = self._fetcher.run(version, timeout, self._plan_for, lambda _: None, progress, progress_interval,
                                cancel=cancel)
        assert self._plan is not None
        pairs = [(n, t) for n, t in self._plan.pairs if n != DIGEST_NAME]
        self._weights = Weights(got, pairs, self._plan.layout)
        return self._weights

    def _plan_for(self, version: int, fresh: bool) -> _Plan:
        if self._plan is not None and not fresh:
            return self._plan
        desc = self._client.describe(self.model, version, self._shard)
        layout = _layout(desc)
        if self._plan is not None and self._plan.layout == layout:
            return self._plan
        self.release()  # the old buffers are dropped
        pairs: list[tuple[str, torch.Tensor]] = []
        digest = _digest_buffer(layout)
        for name, dtype_id, shape in layout:
            if name == DIGEST_NAME:
                assert digest is not None
                pairs.append((name, digest))
                continue
            pin = self._pin and self._device.type == "cpu"
            pairs.append((name, torch.empty(shape, dtype=torch_dtype(DType(dtype_id)), device=self._device,
                                            pin_memory=pin)))
        self._plan = _Plan(layout, pairs, digest)
        return self._plan

    def release(self) -> None:
        """Stops serving the buffers."""
        self._fetcher.release()

    def close(self) -> None:
        """Stops serving and drops the buffers. A fetch in flight on another
        thread ends first: it raises Canceled there (an engine shutting down
        mid-update does not wait out the fetch's timeout)."""
        self._fetcher.cancel_running()
        self.release()
        self._plan = None
        self._weights = None

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
