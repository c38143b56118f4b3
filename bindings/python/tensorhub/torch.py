"""PyTorch modules and state_dicts as tensorhub weight versions.

One class per place a model lives in an RL job:

- Publisher (trainer): publishes a module's parameters and persistent buffers
  *in place*: the replica's memory is the parameter storage, nothing is copied.
  Every in-place change of them (optimizer.step(), load_state_dict) must follow
  the mutability contract: attach the optimizer (publisher.attach(opt)) or wrap
  the change in ``with publisher.mutation():``.
- Receiver (rollout): fetches a version straight into a module's own parameter
  storage, then serves it to other readers. Names, dtypes and shapes are checked
  against the published layout before any byte is written.
- Staging (engines whose load path takes (name, tensor) pairs, such as vLLM's
  model.load_weights): a version lands complete, and verified when the publisher
  added digests, in buffers it owns; only then is it handed out as pairs.
- StagedPublisher (trainer): publishes tensors that do not live long enough to
  be published in place (FSDP full_tensor() results, a converted export) by
  copying them into buffers it owns.
- Prefetcher (rollout): fetches the next version into a spare set of tensors
  on a background thread while the module keeps the current one, in use and
  served; swap() makes it the module's, so the rollout's stall is the swap.
- ReshardingReceiver (rollout of another tensor-parallel degree): reads this
  rank's rows or columns of each tensor from the publisher's shards that
  hold them (ranged fetches: only those bytes move).

Digests: a publisher made with digest=True adds one tensor, DIGEST_NAME (uint8,
one 16-byte BLAKE2b row per tensor, over the model name, the version, the
tensor's name, dtype, shape and bytes). Receiver and Staging check it after
every fetch and raise DigestMismatch naming the tensors that differ, so an
update can be verified end to end, not only by the transport.

Tied weights (lm_head.weight and embed_tokens.weight sharing storage) are
published once, under the first name the state_dict gives; a receiver whose
module ties them the same way fills both.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Union

try:
    import torch
except ImportError as e:  # pragma: no cover - exercised only without torch
    raise ImportError("tensorhub.torch needs PyTorch (pip install torch)") from e

from ._common import LATEST, to_ms, version_arg
from ._errors import (
    Closed,
    InvalidArgument,
    LayoutMismatch,
    ProtocolError,
    TensorHubError,
    Timeout,
    TransportError,
    Unavailable,
    error_for,
)
from ._sync import ProgressCallback, ProgressHook
from ._ranges import Range
from ._tensors import _BY_NAME, DType, View, to_c, torch_dtype, view_of
from .client import Client
from .replica import Replica

__all__ = ["Publisher", "StagedPublisher", "Receiver", "Staging", "Weights", "Prefetcher", "ReshardingReceiver",
           "Splits", "DigestMismatch", "DIGEST_NAME", "named_tensors", "state_digests"]

DIGEST_NAME = "__tensorhub__.digest"
"""The tensor a publisher made with digest=True appends to each version."""

_DIGEST_BYTES = 16
_DIGEST_PERSON = b"tensorhub.v1"

Source = Union[torch.nn.Module, Mapping[str, torch.Tensor]]
"""A module (its state_dict: parameters and persistent buffers) or a name -> tensor mapping."""

Rename = Callable[[str], Union[str, None]]
"""Maps a local name to the published one; None leaves the tensor out."""


class DigestMismatch(ProtocolError):
    """The bytes fetched are not the bytes the publisher digested: a holder
    changed published memory outside the mutability contract, or served
    something else. The destination holds no verified version."""

    def __init__(self, code: int, message: str, names: tuple[str, ...] = ()) -> None:
        super().__init__(code, message)
        self.names = names
        """The tensors whose bytes differ, in published order."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.code, self.message, self.names))


# --------------------------------------------------------------------------- #
# Collecting a module's tensors
# --------------------------------------------------------------------------- #


def _what(t: torch.Tensor) -> str:
    return f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)} on {t.device}"


_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _is_dtensor(t: torch.Tensor) -> bool:
    return type(t) not in _PLAIN and (type(t).__name__ == "DTensor" or hasattr(t, "to_local")
                                      and hasattr(t, "placements"))


def _items(source: Source, buffers: bool) -> list[tuple[str, Any]]:
    if isinstance(source, torch.nn.Module):
        items = list(source.state_dict(keep_vars=True).items())
        if not buffers:
            params = {n for n, _ in source.named_parameters(remove_duplicate=False)}
            items = [(n, t) for n, t in items if n in params]
        return items
    if isinstance(source, Mapping):
        return list(source.items())
    raise InvalidArgument(-1, f"expected a torch.nn.Module or a mapping of name -> tensor, got "
                          f"{type(source).__module__}.{type(source).__qualname__}")


def named_tensors(source: Source, *, buffers: bool = True,
                  rename: Rename | None = None) -> tuple[list[tuple[str, torch.Tensor]], dict[str, str]]:
    """The tensors a module or mapping publishes, in state_dict order, each
    storage once.

    Returns:
        (pairs, aliases): the (name, tensor) pairs, and for each name left out
        because it shares its storage with an earlier one (tied weights), the
        name it is published under.

    Raises:
        InvalidArgument: a value is not a torch.Tensor, is a DTensor, two names
            collide after `rename`, or two tensors overlap without being the
            same view of the same memory.
    """
    return _check(_items(source, buffers), rename)


class _Collector:
    """named_tensors() of one source, again and again: when the state_dict
    holds the same tensor objects at the same addresses as last time (the
    steady state of a training or serving loop), the checks are not redone.
    `generation` changes whenever the result does."""

    def __init__(self, source: Source, buffers: bool, rename: Rename | None) -> None:
        self._source, self._buffers, self._rename = source, buffers, rename
        self._objects: list[Any] = []
        self._ptrs: list[int] = []
        self._names: list[str] = []
        self._result: tuple[list[tuple[str, torch.Tensor]], dict[str, str]] | None = None
        self.generation = 0

    def collect(self) -> tuple[list[tuple[str, torch.Tensor]], dict[str, str]]:
        items = _items(self._source, self._buffers)
        names = [n for n, _ in items]
        objects = [t for _, t in items]
        try:
            ptrs = [t.data_ptr() for t in objects]
        except (AttributeError, TypeError, RuntimeError):
            ptrs = []  # not all tensors: _check says which
        if self._result is not None and ptrs and names == self._names and ptrs == self._ptrs and \
                all(a is b for a, b in zip(objects, self._objects)):
            return self._result
        self._result = _check(items, self._rename)
        self._objects, self._ptrs, self._names = objects, ptrs, names
        self.generation += 1
        return self._result


def _check(items: list[tuple[str, Any]], rename: Rename | None
           ) -> tuple[list[tuple[str, torch.Tensor]], dict[str, str]]:
    pairs: list[tuple[str, torch.Tensor]] = []
    aliases: dict[str, str] = {}
    names: set[str] = set()
    first: dict[tuple[Any, ...], str] = {}
    spans: list[tuple[int, int, int, str]] = []
    for local_name, t in items:
        name = local_name
        if rename is not None:
            renamed = rename(local_name)
            if renamed is None:
                continue
            name = renamed
        if not isinstance(t, torch.Tensor):
            raise InvalidArgument(-1, f"tensor '{local_name}' is a {type(t).__qualname__}, not a torch.Tensor")
        if _is_dtensor(t):
            raise InvalidArgument(-1, f"tensor '{local_name}' is a DTensor: publish each rank's local shard "
                                  "({name: t.to_local()}) as a shard, or full tensors through StagedPublisher")
        if name in names or name in aliases:
            raise InvalidArgument(-1, f"two tensors are published as '{name}' (check `rename`)")
        if name == DIGEST_NAME:
            raise InvalidArgument(-1, f"the name '{DIGEST_NAME}' is reserved for digests")
        nbytes = t.nbytes
        if nbytes:
            device, ptr = t.get_device(), t.data_ptr()  # get_device(): -1 for CPU memory
            key = (device, ptr, t.dtype, t.shape, t.stride())
            if key in first:
                aliases[name] = first[key]
                continue
            first[key] = name
            spans.append((device, ptr, ptr + nbytes, name))
        names.add(name)
        pairs.append((name, t))
    _refuse_overlaps(spans)
    return pairs, aliases


def _refuse_overlaps(spans: list[tuple[int, int, int, str]]) -> None:
    spans.sort()
    for a, b in zip(spans, spans[1:]):
        if a[0] == b[0] and b[1] < a[2]:
            raise InvalidArgument(-1, f"tensors '{a[3]}' and '{b[3]}' share memory without being the same tensor "
                                  "(views into one flat buffer?): tensorhub moves each tensor's own bytes, so "
                                  "publish the flat buffer, or pass tensors that do not overlap")


def _synchronize(tensors: Iterable[torch.Tensor]) -> None:
    """Waits for the kernels that write or read `tensors` on CUDA devices, so that
    tensorhub reads finished bytes and writes none that a kernel still reads."""
    if not torch.cuda.is_initialized():
        return  # no tensor of this process can be in CUDA memory
    for device in {t.device for t in tensors if t.is_cuda}:
        torch.cuda.synchronize(device)


# --------------------------------------------------------------------------- #
# Digests
# --------------------------------------------------------------------------- #


def _host_bytes(t: torch.Tensor) -> Any:
    flat = t.detach().reshape(-1)
    if flat.device.type != "cpu":
        flat = flat.cpu()
    return flat.view(torch.uint8).numpy()


def _digest(model: str, version: int, name: str, t: torch.Tensor) -> bytes:
    h = hashlib.blake2b(digest_size=_DIGEST_BYTES, person=_DIGEST_PERSON)
    h.update(f"{model}\0{version}\0{name}\0{str(t.dtype).removeprefix('torch.')}\0{list(t.shape)}\0".encode())
    if t.numel():
        h.update(_host_bytes(t))
    return h.digest()


def state_digests(model: str, version: int, pairs: Iterable[tuple[str, torch.Tensor]]) -> torch.Tensor:
    """The DIGEST_NAME tensor for (name, tensor) pairs published as `version` of `model`."""
    rows = b"".join(_digest(model, version, name, t) for name, t in pairs)
    return torch.frombuffer(bytearray(rows), dtype=torch.uint8).reshape(-1, _DIGEST_BYTES)


def _write_digests(model: str, version: int, pairs: list[tuple[str, torch.Tensor]], out: torch.Tensor) -> None:
    out.copy_(state_digests(model, version, pairs))


def _check_digests(model: str, version: int, pairs: list[tuple[str, torch.Tensor]], got: torch.Tensor,
                   where: str) -> None:
    want = state_digests(model, version, pairs)
    if want.shape != got.shape:
        raise DigestMismatch(ProtocolError.code, f"{where}: version {version} of '{model}' carries "
                             f"{got.shape[0]} digests for {len(pairs)} tensors")
    rows = (want != got.cpu()).any(dim=1).nonzero().flatten().tolist()
    if rows:
        bad = tuple(pairs[i][0] for i in rows)
        shown = ", ".join(f"'{n}'" for n in bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise DigestMismatch(ProtocolError.code, f"{where}: version {version} of '{model}' arrived with bytes that "
                             f"differ from what its publisher digested, in {shown}", bad)


# --------------------------------------------------------------------------- #
# Trainer side
# --------------------------------------------------------------------------- #


class _Publishing:
    """What Publisher and StagedPublisher share: the replica serving the last
    version, and publishing (name, tensor) pairs with their digests. The
    subclass sets model, _client, _shard, _num_shards, _chunk_bytes, _digest, _checksums."""

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


# --------------------------------------------------------------------------- #
# Reader side
# --------------------------------------------------------------------------- #

_TORN_ERRORS = (Unavailable, Timeout, TransportError, Closed)
"""Errors that may come after bytes were written into the destination."""


def _spec(dtype_name: str, shape: Iterable[int]) -> str:
    return f"{dtype_name}{list(shape)}"


@dataclass
class _Plan:
    layout: tuple[tuple[str, int, tuple[int, ...]], ...]  # the published (name, dtype id, shape)
    pairs: list[tuple[str, torch.Tensor]]                # destinations in published order, digest included
    digest: torch.Tensor | None                          # where DIGEST_NAME lands, if published
    views: list[View] = field(init=False)                # the pairs as the binding passes them to C,
    c_tensors: Any = field(init=False)                   # built once: 10-15 us per tensor

    def __post_init__(self) -> None:
        self.views = [view_of(name, t, writable=True) for name, t in self.pairs]
        self.c_tensors = to_c(self.views)


def _layout(desc: dict[str, Any]) -> tuple[tuple[str, int, tuple[int, ...]], ...]:
    return tuple((t["name"], int(t["dtype_id"]), tuple(int(s) for s in t["shape"])) for t in desc["tensors"])


def _digest_buffer(layout: tuple[tuple[str, int, tuple[int, ...]], ...]) -> torch.Tensor | None:
    if not layout or layout[-1][0] != DIGEST_NAME:
        return None
    _, dtype_id, shape = layout[-1]
    return torch.empty(shape, dtype=torch_dtype(DType(dtype_id)))


def _torn(e: TensorHubError, what: str) -> TensorHubError:
    """`e`, saying that the destination may now hold parts of two versions."""
    out = error_for(e.code, f"{e.message}; {what} may have been partly overwritten and hold no complete "
                            "version: fetch again before using it")
    out.__cause__ = e
    return out


class _Fetcher:
    """The retry loop Receiver and Staging share: fetch a planned destination,
    re-plan when the version's layout changed, fetch the newest version again
    when every holder of the one asked for went away, verify digests."""

    def __init__(self, client: Client, model: str, shard: int, verify: bool, serve: bool, what: str) -> None:
        self._client = client
        self.model = model
        self.shard = shard
        self._verify = verify
        self._serve = serve
        self._what = what
        self._replica: Replica | None = None
        self._plan: _Plan | None = None  # what the last fetch wrote into
        self.version: int | None = None

    def release(self) -> None:
        if self._replica is not None:
            self._replica.release()  # Retained propagates: it stays served
            self._replica = None

    def run(self, version: int, timeout: float, plan_for: Callable[[int, bool], _Plan],
            on_done: Callable[[_Plan], None], progress: ProgressCallback | None = None,
            progress_interval: float | None = None) -> int:
        """Fetches `version` (or LATEST) into plan_for(version, fresh)'s
        destination and returns the version delivered; `fresh` asks for a plan
        made from a describe() of that version."""
        version_arg(version)
        deadline = time.monotonic() + timeout
        fresh = False
        layout_retries = 0
        failed: tuple[int, TensorHubError] | None = None  # the version every holder of left, and how
        while True:
            # Resolve once per attempt, then fetch that exact version: the
            # plan, the fetch and the digests all speak of the same one.
            target = self._client.resolve(self.model, version)
            plan = plan_for(target, fresh)
            if plan is self._plan and self.version == target and self._replica is not None and \
                    not self._replica.released:
                # Held and served already: fetching it again would first give
                # it up, and a reader is never routed to its own copy.
                return target
            if failed is not None and target <= failed[0]:
                # No newer version to fall back on.
                raise _torn(failed[1], self._what) from failed[1]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                error = Timeout(Timeout.code, f"no complete fetch of '{self.model}' within {timeout} s")
                raise error if failed is None else _torn(error, self._what)
            _synchronize(t for _, t in plan.pairs)
            # The destination is about to be overwritten: stop serving it.
            self.release()
            self.version = None
            self._plan = plan
            try:
                got, replica = self._fetch(target, plan, remaining, progress, progress_interval)
            except LayoutMismatch:
                # Checked before any byte is written: the plan is older than
                # the version's layout. Describe the version and check again.
                if fresh and layout_retries >= 2:
                    raise
                fresh, layout_retries = True, layout_retries + 1
                continue
            except _TORN_ERRORS as e:
                if isinstance(e, Unavailable) and version == LATEST:
                    # Every holder of the newest version left mid-read (the
                    # trainer overwrote it and the rollouts moved on): a newer
                    # one is usually committed by then. Fetch that, if so.
                    failed = (target, e)
                    continue
                raise _torn(e, self._what) from e
            self._replica = replica
            if plan.digest is not None and self._verify:
                try:
                    _check_digests(self.model, got, [p for p in plan.pairs if p[0] != DIGEST_NAME], plan.digest,
                                   self._what)
                except DigestMismatch:
                    self.release()
                    raise
            on_done(plan)
            self.version = got
            return got

    def _fetch(self, version: int, plan: _Plan, remaining: float, progress: ProgressCallback | None,
               progress_interval: float | None) -> tuple[int, Replica | None]:
        # Client.fetch_replica / fetch(serve=False), with the plan's views
        # and C array instead of new ones.
        hook = ProgressHook(progress, None if progress_interval is None else
                            to_ms(progress_interval, "progress_interval"))
        got, replica = self._client._fetch(self.model, version, plan.views, self.shard, remaining,
                                           serve=self._serve, hook=hook, c_tensors=plan.c_tensors)
        try:
            hook.raise_if_failed()
        except BaseException:
            if replica is not None:
                try:
                    replica.release()
                except TensorHubError:
                    pass  # Retained: the client keeps it and frees it on close()
            raise
        return got, replica


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
              progress_interval: float | None = None) -> int:
        """Fetches `version` (default: the newest committed) into the module.
        `progress` and `progress_interval` are as Client.fetch's.

        Returns:
            The version now in the module.

        Raises:
            LayoutMismatch: names, dtypes or shapes differ (the message lists
                them); nothing was written.
            InvalidArgument: a local tensor cannot be fetched into (not
                contiguous, not CPU/CUDA, overlapping); nothing was written.
            DigestMismatch: the bytes are not the ones the publisher digested.
            VersionNotFound, NotCommitted; and Unavailable, Timeout,
            TransportError, which say whether the module was partly overwritten.
        """
        if self._staging is not None:
            return self._fetch_staged(version, timeout, progress, progress_interval)
        try:
            return self._fetcher.run(version, timeout, self._plan_for, self._done, progress, progress_interval)
        finally:
            # Unchanged when the fetch failed before writing (no such version,
            # a layout mismatch); None once bytes may have landed.
            self.version = self._fetcher.version

    def update(self, *, timeout: float = 60.0) -> int:
        """Waits for a version newer than the one held (any, if none is) and
        fetches the newest. Returns it."""
        deadline = time.monotonic() + timeout
        self._client.wait_for_version(self.model, newer_than=self.version or 0, timeout=timeout)
        return self.fetch(LATEST, timeout=max(0.001, deadline - time.monotonic()))

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
                      progress_interval: float | None) -> int:
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
                                      progress_interval=progress_interval)
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
        """Stops serving. Idempotent."""
        self.stop_serving()

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _still_valid(plan: _Plan, local: list[tuple[str, torch.Tensor]], strict: bool) -> bool:
    """Whether the module still has the tensors `plan` writes into: same
    names, same storage (a parameter replaced by .to() or .data = ... is not)."""
    mine = dict(local)
    planned = [(n, t) for n, t in plan.pairs if n != DIGEST_NAME]
    if strict and len(mine) != len(planned):
        return False
    return all(n in mine and mine[n].data_ptr() == t.data_ptr() and mine[n].dtype == t.dtype and
               mine[n].shape == t.shape for n, t in planned)


def _bump_versions(tensors: list[torch.Tensor]) -> None:
    # The bytes changed behind autograd's back: an autograd graph that saved
    # one of these tensors must fail at backward rather than use new values.
    bump = getattr(torch.autograd.graph, "increment_version", None)
    if bump is None:
        return
    tracked = [t for t in tensors if not t.is_inference()]
    try:
        bump(tracked)
    except TypeError:  # torch before 2.3 takes one tensor at a time
        for t in tracked:
            bump(t)


def _match(desc: dict[str, Any], local: list[tuple[str, torch.Tensor]], aliases: dict[str, str], strict: bool,
           where: str) -> _Plan:
    """The destination of a described version in `local`, or LayoutMismatch
    listing every difference (names, dtypes, shapes)."""
    layout = _layout(desc)
    mine = dict(local)
    problems: list[str] = []
    pairs: list[tuple[str, torch.Tensor]] = []
    digest = _digest_buffer(layout)
    published = {name for name, _, _ in layout}
    for name, dtype_id, shape in layout:
        if name == DIGEST_NAME:
            assert digest is not None
            pairs.append((name, digest))
            continue
        dtype = DType(dtype_id)
        want = _spec(dtype.name.lower(), shape)
        t = mine.get(name)
        if t is None:
            if name in aliases:
                problems.append(f"'{name}' is published on its own, but the module ties it to '{aliases[name]}'")
            else:
                problems.append(f"'{name}' ({want}) is published but the module has no such tensor")
            continue
        if _BY_NAME.get(str(t.dtype).removeprefix("torch.")) != dtype or tuple(t.shape) != shape:
            problems.append(f"'{name}' is published as {want}, the module's is {_what(t)}")
            continue
        pairs.append((name, t))
    if strict:
        for name, t in local:
            if name not in published:
                hint = " (the publisher may tie it to another tensor)" if t.numel() else ""
                problems.append(f"the module's '{name}' ({_what(t)}) is not in the version{hint}")
    if problems:
        shown = "; ".join(problems[:8]) + (f"; and {len(problems) - 8} more" if len(problems) > 8 else "")
        raise LayoutMismatch(LayoutMismatch.code, f"{where}: {shown}; nothing was written")
    # Building the plan checks that every destination can be written in place
    # (contiguous, CPU or CUDA): InvalidArgument names the one that cannot.
    return _Plan(layout, pairs, digest)


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
              progress_interval: float | None = None) -> Weights:
        """Fetches `version` (default: the newest committed) into the buffers.
        `progress` and `progress_interval` are as Client.fetch's.

        Raises:
            DigestMismatch, VersionNotFound, NotCommitted, Unavailable,
            Timeout, TransportError.
        """
        self._weights = None
        got = self._fetcher.run(version, timeout, self._plan_for, lambda _: None, progress, progress_interval)
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
        """Stops serving and drops the buffers."""
        self.release()
        self._plan = None
        self._weights = None

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------- #
# Background prefetch
# --------------------------------------------------------------------------- #


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
        self._closing = threading.Event()
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
                                         lambda _: None)
            self.last_fetch_s = time.perf_counter() - started
            self.last_sync_stats = self._client.last_sync_stats
            self._outcome = (index, got)
        except BaseException as e:  # noqa: BLE001 - raised by swap()
            self._outcome = e

    def _wait_newer(self, newer: int, wait_timeout: float | None) -> None:
        deadline = None if wait_timeout is None else time.monotonic() + wait_timeout
        while True:
            if self._closing.is_set():
                raise Closed(Closed.code, f"the prefetcher of '{self.model}' was closed while waiting for a version")
            step = 0.5 if deadline is None else min(0.5, deadline - time.monotonic())
            try:
                self._client.wait_for_version(self.model, newer_than=newer, timeout=max(0.001, step))
                return
            except Timeout:
                if deadline is not None and time.monotonic() >= deadline:
                    raise

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
        if tensor_set.tensors is None:
            with torch.no_grad():
                tensor_set.tensors = {name: torch.empty_like(t, memory_format=torch.contiguous_format)
                                      for name, t in self._local}
        digest = _digest_buffer(layout)
        pairs: list[tuple[str, torch.Tensor]] = []
        for name, _, _ in layout:
            pairs.append((name, digest) if name == DIGEST_NAME else (name, tensor_set.tensors[name]))
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
        """Stops waiting for a version, lets a fetch in flight end (within its
        deadline) and stops serving both sets. Idempotent. The module keeps the
        tensors it points at."""
        self._closing.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        for tensor_set in self._sets:
            tensor_set.fetcher.release()

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------- #
# Resharding: a reader of another tensor-parallel degree
# --------------------------------------------------------------------------- #

Splits = Union[Mapping[str, Union[int, None]], Callable[[str], Union[int, None]]]
"""Per published tensor name, the dimension the publisher's shards split it
along, or None for a tensor every shard holds whole."""


@dataclass
class _ReshardPlan:
    key: tuple[Any, ...]                          # the shard layouts it was made for
    pairs: list[tuple[str, torch.Tensor]]         # the reader's tensors, in published order
    fetches: list[tuple[int, list[Range]]]        # per publisher shard, the ranges read from it


class ReshardingReceiver:
    """Fetches, for tensor-parallel rank `tp_rank` of `tp_size`, exactly the
    part of each tensor it needs from a version published as `num_shards`
    shards by a publisher of another degree, into the reader's own tensors.

    Shard s of the publisher holds block s of `num_shards` equal blocks of each
    split tensor along its split dimension (Megatron-style column- and
    row-parallel layers: dimension 0 or 1 of a weight). The reader's block
    `tp_rank` of `tp_size` is read from the shards that hold it, one fetch per
    shard (Client.fetch_ranges: one plan, then only those rows or columns
    move). A TP=1 reader gathers every shard; a TP=4 rank reads half of one
    TP=2 shard; a TP=2 reader of a TP=4 version reads two shards.

        splits = {"qkv.weight": 0, "out.weight": 1, "norm.weight": None}
        reader = ReshardingReceiver(client, "policy", splits, tp_size=4, tp_rank=rank, target=model)
        reader.fetch(timeout=60)

    Args:
        splits: the split dimension of each published name (a mapping, whose
            missing names count as None, or a function); None: every shard
            holds the whole tensor, read from shard
            tp_rank * num_shards // tp_size (where this rank's blocks start).
        tp_size, tp_rank: the reader's tensor-parallel degree and rank.
        target: the module (its state_dict) or name -> tensor mapping to fill
            in place, with the reader's shapes; None: the receiver allocates
            the tensors on `device` (see `tensors`).
        strict, buffers, rename: as Receiver.

    The destinations do not serve other readers: they hold parts of shards.
    Digests (DIGEST_NAME) cover whole shard tensors, so they are not checked.
    """

    def __init__(self, client: Client, model: str, splits: Splits, *, tp_size: int, tp_rank: int,
                 target: Source | None = None, strict: bool = True, buffers: bool = True,
                 rename: Rename | None = None, device: str | torch.device = "cpu") -> None:
        if not isinstance(tp_size, int) or tp_size < 1 or not isinstance(tp_rank, int) or \
                not 0 <= tp_rank < tp_size:
            raise InvalidArgument(-1, f"tp_rank {tp_rank!r} of tp_size {tp_size!r}: need 0 <= tp_rank < tp_size")
        self._client = client
        self.model = model
        self._split = splits if callable(splits) else (lambda name, m=dict(splits): m.get(name))
        self.tp_size, self.tp_rank = tp_size, tp_rank
        self._target = target
        self._collector = None if target is None else _Collector(target, buffers, rename)
        self._strict = strict
        self._device = torch.device(device)
        self._plan: _ReshardPlan | None = None
        self._plan_generation = -1
        self.version: int | None = None
        """The version the tensors hold (None before a fetch, or after one that failed midway)."""
        self.last_sync_stats: list[dict[str, Any]] = []
        """One summary per publisher shard read by the last fetch (Client.last_sync_stats)."""

    @property
    def tensors(self) -> dict[str, torch.Tensor]:
        """The reader's tensors by published name (the target's, or allocated)."""
        return {} if self._plan is None else dict(self._plan.pairs)

    def fetch(self, version: int = LATEST, *, timeout: float = 60.0) -> int:
        """Fetches this rank's part of `version` (default: the newest
        committed) and returns the version.

        Raises:
            LayoutMismatch: a target tensor is missing or has another dtype or
                shape than this rank's part; nothing was written.
            InvalidArgument: a split does not divide evenly (names the tensor).
            VersionNotFound, NotCommitted; Unavailable, Timeout and
            TransportError say the tensors may hold parts of two versions.
        """
        version_arg(version)
        deadline = time.monotonic() + timeout
        target = self._client.resolve(self.model, version)
        plan = self._plan_for(target)
        tensors = [t for _, t in plan.pairs]
        _synchronize(tensors)
        self.version = None
        stats: list[dict[str, Any]] = []
        try:
            for shard, ranges in plan.fetches:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise Timeout(Timeout.code, f"no complete fetch of '{self.model}' within {timeout} s")
                self._client.fetch_ranges(self.model, ranges, target, shard=shard, timeout=remaining)
                last = self._client.last_sync_stats
                assert last is not None
                stats.append(last)
        except _TORN_ERRORS as e:
            raise _torn(e, f"this rank's tensors of '{self.model}'") from e
        self.last_sync_stats = stats
        _bump_versions(tensors)
        self.version = target
        return target

    def _plan_for(self, version: int) -> _ReshardPlan:
        first = self._client.describe(self.model, version, 0)
        descs = [first] + [self._client.describe(self.model, version, s) for s in range(1, first["num_shards"])]
        layouts = [_layout(d) for d in descs]
        local: list[tuple[str, torch.Tensor]] = []
        if self._collector is not None:
            local, _ = self._collector.collect()
        key = tuple(layouts)
        if self._plan is not None and self._plan.key == key and \
                (self._collector is None or self._plan_generation == self._collector.generation):
            return self._plan
        self._plan = self._make_plan(key, layouts, local)
        if self._collector is not None:
            self._plan_generation = self._collector.generation
        return self._plan

    def _make_plan(self, key: tuple[Any, ...], layouts: list[tuple[tuple[str, int, tuple[int, ...]], ...]],
                   local: list[tuple[str, torch.Tensor]]) -> _ReshardPlan:
        where = f"cannot fetch tp rank {self.tp_rank} of {self.tp_size} of '{self.model}'"
        shards = len(layouts)
        published = [(n, d, s) for n, d, s in layouts[0] if n != DIGEST_NAME]
        for s, layout in enumerate(layouts[1:], start=1):
            names = [(n, d) for n, d, _ in layout if n != DIGEST_NAME]
            if names != [(n, d) for n, d, _ in published]:
                raise LayoutMismatch(LayoutMismatch.code, f"{where}: shard {s} publishes other tensors (or dtypes) "
                                     "than shard 0")
        mine = dict(local)
        old = dict(self._plan.pairs) if self._plan is not None else {}
        problems: list[str] = []
        pairs: list[tuple[str, torch.Tensor]] = []
        by_shard: dict[int, list[Range]] = {}
        for index, (name, dtype_id, _) in enumerate(published):
            dtype = DType(dtype_id)
            dim = self._split(name)
            shapes = [layout[index][2] for layout in layouts]
            shape, sources = self._reader_part(name, dim, shapes, shards)
            want = _spec(dtype.name.lower(), shape)
            if self._collector is not None:
                t = mine.get(name)
                if t is None:
                    problems.append(f"'{name}' ({want} for this rank) is published but the target has no such tensor")
                    continue
                if _BY_NAME.get(str(t.dtype).removeprefix("torch.")) != dtype or tuple(t.shape) != shape:
                    problems.append(f"'{name}' is {want} for this rank, the target's is {_what(t)}")
                    continue
            else:
                t = old.get(name)
                if t is None or t.dtype != torch_dtype(dtype) or tuple(t.shape) != shape:
                    t = torch.empty(shape, dtype=torch_dtype(dtype), device=self._device)
            pairs.append((name, t))
            if t.numel() == 0:
                continue
            for shard, r in self._ranges(name, dim, shapes, shape, dtype.itemsize, sources, t):
                by_shard.setdefault(shard, []).append(r)
        if self._strict and self._collector is not None:
            names = {n for n, _, _ in published}
            for name, t in local:
                if name not in names:
                    problems.append(f"the target's '{name}' ({_what(t)}) is not in the version")
        if problems:
            shown = "; ".join(problems[:8]) + (f"; and {len(problems) - 8} more" if len(problems) > 8 else "")
            raise LayoutMismatch(LayoutMismatch.code, f"{where}: {shown}; nothing was written")
        return _ReshardPlan(key, pairs, sorted(by_shard.items()))

    def _reader_part(self, name: str, dim: int | None, shapes: list[tuple[int, ...]],
                     shards: int) -> tuple[tuple[int, ...], list[int]]:
        """This rank's shape of tensor `name`, and the publisher shards it reads."""
        if dim is None:
            # The shard where this rank's blocks start: a rank reads as few shards as it can.
            shard = self.tp_rank * shards // self.tp_size
            return shapes[shard], [shard]
        local = shapes[0]
        if not isinstance(dim, int) or not 0 <= dim < len(local):
            raise InvalidArgument(-1, f"tensor '{name}': split dimension {dim!r} of a {len(local)}-d tensor")
        if any(s != local for s in shapes):
            raise LayoutMismatch(LayoutMismatch.code, f"tensor '{name}': the shards hold blocks of different shapes "
                                 f"({', '.join(str(list(s)) for s in shapes)}); only even splits can be resharded")
        full = local[dim] * shards
        if full % self.tp_size:
            raise InvalidArgument(-1, f"tensor '{name}': dimension {dim} has {full} entries in all, which do not "
                                  f"split into {self.tp_size} equal parts")
        part = full // self.tp_size
        lo, hi = self.tp_rank * part, (self.tp_rank + 1) * part
        shape = tuple(part if d == dim else n for d, n in enumerate(local))
        return shape, list(range(lo // local[dim], (hi - 1) // local[dim] + 1)) if part else []

    def _ranges(self, name: str, dim: int | None, shapes: list[tuple[int, ...]], shape: tuple[int, ...],
                itemsize: int, sources: list[int], into: torch.Tensor) -> Iterator[tuple[int, Range]]:
        if dim is None:
            yield sources[0], Range(name, into)
            return
        held = shapes[0][dim]  # entries of dimension dim per publisher shard
        part = shape[dim]
        lo, hi = self.tp_rank * part, (self.tp_rank + 1) * part
        for shard in sources:
            a, b = max(lo, shard * held), min(hi, (shard + 1) * held)
            yield shard, Range.block(name, shapes[shard], itemsize, dim, a - shard * held, b - shard * held, into,
                                     into_shape=shape, into_start=a - lo)

    def close(self) -> None:
        """Drops the plan (and allocated tensors). Idempotent."""
        self._plan = None

    def __enter__(self) -> ReshardingReceiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
