"""Collecting the tensors a module or mapping publishes or fills, each
storage once, and what every part does around them (CUDA synchronization,
autograd versions)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Union

import torch

from .._errors import InvalidArgument
from .digests import DIGEST_NAME

Source = Union[torch.nn.Module, Mapping[str, torch.Tensor]]
"""A module (its state_dict: parameters and persistent buffers) or a name -> tensor mapping."""

Rename = Callable[[str], Union[str, None]]
"""Maps a local name to the published one; None leaves the tensor out."""


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
