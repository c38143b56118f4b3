"""ReshardingReceiver: a reader of another tensor-parallel degree reads its
rows or columns of each tensor from the publisher's shards that hold them."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Union

import torch

from .._common import LATEST, version_arg
from .._errors import InvalidArgument, LayoutMismatch, Timeout, VersionNotFound
from .._ranges import Range
from .._tensors import _BY_NAME, DType, torch_dtype
from ..client import Client
from ._collect import Rename, Source, _bump_versions, _Collector, _synchronize, _what
from ._fetcher import _TORN_ERRORS, _layout, _NewestGone, _spec
from .digests import DIGEST_NAME


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
        committed) and returns the version. The newest: should the version
        resolved go away before it is fetched whole (the trainer let it go,
        or every holder left), the one committed since is fetched.

        Raises:
            LayoutMismatch: a target tensor is missing or has another dtype or
                shape than this rank's part; nothing was written.
            InvalidArgument: a split does not divide evenly (names the tensor).
            VersionNotFound, NotCommitted; Unavailable, Timeout and
            TransportError say the tensors may hold parts of two versions.
        """
        version_arg(version)
        deadline = time.monotonic() + timeout
        newest = _NewestGone(version, deadline, f"this rank's tensors of '{self.model}'")
        while True:
            target = newest.resolve(self._client, self.model)
            try:
                plan = self._plan_for(target)
            except VersionNotFound as e:
                newest.went(target, e, written=False)
                continue
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
            except VersionNotFound as e:
                newest.went(target, e, written=bool(stats))
                continue
            except _TORN_ERRORS as e:
                newest.went(target, e, written=True)
                continue
            break
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
            in_version = {n for n, _, _ in published}
            for name, t in local:
                if name not in in_version:
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
