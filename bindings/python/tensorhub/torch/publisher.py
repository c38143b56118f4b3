"""The trainer side: Publisher (a module's tensors, in place) and
StagedPublisher (tensors copied into buffers it owns)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch

from .._common import version_arg
from .._errors import Closed, InvalidArgument
from .._tensors import View, to_c, view_of
from ..client import Client
from ..replica import Replica
from ._collect import Rename, Source, _Collector, _synchronize
from .digests import _DIGEST_BYTES, DIGEST_NAME, _write_digests


class _Publishing:
    """What Publisher and StagedPublisher share: the replica serving the last
    version, and publishing (name, tensor) pairs with their digests. The
    subclass sets model, _client, _shard, _num_shards, _chunk_bytes, _digest, _checksums."""

    model: str
    _client: Client
    _shard: int
    _num_shards: int
    _chunk_bytes: int
    _digest: bool
    _checksums: bool | None
    _views: _PublishedViews
    _replica: Replica | None
    _digests: torch.Tensor | None

    @property
    def replica(self) -> Replica | None:
        """The replica serving the last published version (None once withdrawn)."""
        return None if self._replica is None or self._replica.released else self._replica

    @property
    def version(self) -> int | None:
        """The version being served (None when none is)."""
        r = self.replica
        return None if r is None else r.version

    def _publish_pairs(self, version: int, pairs: list[tuple[str, Any]]) -> Replica:
        published: list[tuple[str, Any]] = list(pairs)
        if self._digest:
            if self._digests is None or self._digests.shape[0] != len(pairs):
                self._digests = torch.empty((len(pairs), _DIGEST_BYTES), dtype=torch.uint8)
            _write_digests(self.model, version, pairs, self._digests)
            published.append((DIGEST_NAME, self._digests))
        self._replica = self._views.publish(self._client, self.model, version, published, self._shard,
                                            self._num_shards, self._chunk_bytes, self._checksums)
        return self._replica

    def _withdraw(self) -> None:
        _withdraw(self._replica)
        self._replica = None


def _withdraw(replica: Replica | None) -> None:
    """Takes a replica out of service before its buffers are overwritten: reads
    in flight drain (up to the client's mutation_wait), the last copy of a
    required version is spilled (or waited for, per retention policy), then the
    replica is released."""
    if replica is None or replica.released:
        return
    try:
        replica.begin_mutation()
    except Closed:
        return  # released meanwhile (its client closed)
    replica.release()


class _PublishedViews:
    """The views and C array of the last tensors published, reused while
    the same tensors (same storage, dtype and shape) are published again."""

    def __init__(self) -> None:
        self._key: tuple[Any, ...] = ()
        self._views: list[View] = []
        self._c: Any = None

    def publish(self, client: Client, model: str, version: int, pairs: list[tuple[str, Any]], shard: int,
                num_shards: int, chunk_bytes: int, checksums: bool | None) -> Replica:
        key = tuple((name, t.data_ptr(), t.dtype, t.shape) for name, t in pairs)
        if key != self._key:
            self._views = [view_of(name, t, writable=False) for name, t in pairs]
            self._c = to_c(self._views)
            self._key = key
        return client._publish(model, version, self._views, self._c, shard, num_shards, chunk_bytes, checksums)


class Publisher(_Publishing):
    """Publishes a module's (or a mapping's) tensors in place, version after version.

    The replica's memory is the parameter storage: publishing copies nothing,
    and readers read the trainer's parameters. So every in-place change of them
    must first take the replica out of service: call attach(optimizer) once (a
    hook does it before each optimizer.step()), or wrap other changes in
    ``with publisher.mutation():``. Readers in flight then drain, or re-read
    the version from another holder; the last copy of a version still needed is
    spilled into library memory first (the client's retention policy).

        publisher = Publisher(client, "policy", model)
        publisher.attach(optimizer)
        publisher.publish(0)
        for step in range(1, n):
            loss(model).backward()
            optimizer.step()            # withdraws version step-1 first
            publisher.publish(step)

    Args:
        buffers: also publish persistent buffers (the whole state_dict).
        rename: maps local names to published ones (e.g. strip "module."); None drops a tensor.
        digest: append DIGEST_NAME so that readers verify every byte (costs one
            BLAKE2b pass over the parameters per publish, on the CPU).
        shard, num_shards, chunk_bytes, checksums: as Client.publish (the
            library's per-chunk checksums, which readers check a sample of).
    """

    def __init__(self, client: Client, model: str, source: Source, *, shard: int = 0, num_shards: int = 1,
                 chunk_bytes: int = 4 << 20, buffers: bool = True, rename: Rename | None = None,
                 digest: bool = False, checksums: bool | None = None) -> None:
        self._client = client
        self.model = model
        self._checksums = checksums
        self._source = source
        self._shard, self._num_shards, self._chunk_bytes = shard, num_shards, chunk_bytes
        self._buffers, self._rename, self._digest = buffers, rename, digest
        self._digests: torch.Tensor | None = None
        self._replica: Replica | None = None
        self._views = _PublishedViews()
        self._collector = _Collector(source, buffers, rename)
        self.aliases: dict[str, str] = {}
        """Names left out because they share storage with a published one, and that one's name."""

    def publish(self, version: int) -> Replica:
        """Declares the module's current tensors to be `version` and serves them.

        Withdraws the previous version first if it is still served from the
        same memory. Waits for pending CUDA work on the tensors.

        Raises:
            InvalidArgument (a tensor cannot be published: its name is in the
            message), Conflict (version not newer), Unavailable, Timeout.
        """
        version_arg(version)
        self.withdraw()
        pairs, self.aliases = self._collector.collect()
        if not pairs:
            raise InvalidArgument(-1, f"nothing to publish as '{self.model}': the module has no tensors")
        _synchronize(t for _, t in pairs)
        return self._publish_pairs(version, pairs)

    def withdraw(self) -> None:
        """Stops serving the published version from the module so that its
        tensors may be overwritten. Idempotent.

        Raises:
            Retained: it is the last copy of a required version and the
                client's retention policy is "fail"; it is still served.
        """
        self._withdraw()

    @contextmanager
    def mutation(self) -> Iterator[None]:
        """``with publisher.mutation(): ...`` around an in-place change of the
        published tensors. Publish the result with publish(next_version)."""
        self.withdraw()
        yield

    def attach(self, optimizer: torch.optim.Optimizer) -> Any:
        """Withdraws the published version before every optimizer.step().
        Returns the hook's handle (handle.remove() detaches it)."""

        def before_step(_optimizer: Any, _args: Any, _kwargs: Any) -> None:
            self.withdraw()

        return optimizer.register_step_pre_hook(before_step)

    def close(self) -> None:
        """Withdraws the published version. Idempotent."""
        self.withdraw()

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class StagedPublisher(_Publishing):
    """Publishes (name, tensor) pairs by copying them into buffers it owns,
    for tensors that do not outlive the call (FSDP full_tensor() gathers, a
    format conversion) or that will change before readers are done.

    The buffers are allocated at the first publish and reused while names,
    dtypes and shapes stay the same; before they are overwritten, the version
    they hold is withdrawn as Publisher does.

    Args:
        device: where the buffers live ("cpu", "cuda:0"); CUDA needs a library
            built with CUDA.
        pin_memory: page-locked host buffers (faster copies from a GPU).
        digest, shard, num_shards, chunk_bytes, checksums: as Publisher.
    """

    def __init__(self, client: Client, model: str, *, device: str | torch.device = "cpu", pin_memory: bool = False,
                 shard: int = 0, num_shards: int = 1, chunk_bytes: int = 4 << 20, digest: bool = False,
                 checksums: bool | None = None) -> None:
        self._client = client
        self.model = model
        self._checksums = checksums
        self._device = torch.device(device)
        self._pin = pin_memory
        self._shard, self._num_shards, self._chunk_bytes = shard, num_shards, chunk_bytes
        self._digest = digest
        self._buffers: dict[str, torch.Tensor] = {}
        self._digests: torch.Tensor | None = None
        self._replica: Replica | None = None
        self._views = _PublishedViews()

    def buffers(self) -> dict[str, torch.Tensor]:
        """The buffers, by published name, in published order."""
        return dict(self._buffers)

    def publish(self, version: int, tensors: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]) -> Replica:
        """Copies `tensors` into the buffers and publishes them as `version`.
        `tensors` is consumed once, one pair at a time (a generator that gathers
        each tensor only when asked is fine).

        Raises:
            InvalidArgument naming the tensor (not a tensor, a repeated name), and
            what Client.publish raises. If `tensors` raises, nothing is published.
        """
        version_arg(version)
        self._withdraw()
        items: Iterable[Any] = tensors.items() if isinstance(tensors, Mapping) else tensors
        kept: dict[str, torch.Tensor] = {}
        with torch.no_grad():
            for name, t in items:
                if not isinstance(name, str) or not isinstance(t, torch.Tensor):
                    raise InvalidArgument(-1, f"expected (name, torch.Tensor) pairs, got ({name!r}, "
                                          f"{type(t).__qualname__})")
                if name in kept:
                    raise InvalidArgument(-1, f"tensor '{name}' is given twice")
                if name == DIGEST_NAME:
                    raise InvalidArgument(-1, f"the name '{DIGEST_NAME}' is reserved for digests")
                buf = self._buffers.get(name)
                if buf is None or buf.dtype != t.dtype or buf.shape != t.shape:
                    buf = torch.empty(t.shape, dtype=t.dtype, device=self._device,
                                      pin_memory=self._pin and self._device.type == "cpu")
                buf.copy_(t.detach())
                kept[name] = buf
        if not kept:
            raise InvalidArgument(-1, f"nothing to publish as '{self.model}': no tensors given")
        self._buffers = kept
        pairs = list(kept.items())
        _synchronize(kept.values())
        return self._publish_pairs(version, pairs)

    def withdraw(self) -> None:
        """Stops serving the buffers. Idempotent."""
        self._withdraw()

    def close(self) -> None:
        """Withdraws and drops the buffers."""
        self.withdraw()
        self._buffers = {}

    def __enter__(self) -> StagedPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
