"""End-to-end digests: a publisher made with digest=True appends DIGEST_NAME
(uint8, one 16-byte BLAKE2b row per tensor, over the model name, the
version, the tensor's name, dtype, shape and bytes); readers check it after
every fetch."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import torch

from .._errors import ProtocolError

DIGEST_NAME = "__tensorhub__.digest"
"""The tensor a publisher made with digest=True appends to each version."""

_DIGEST_BYTES = 16
_DIGEST_PERSON = b"tensorhub.v1"


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
