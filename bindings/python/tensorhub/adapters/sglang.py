"""SGLang: load tensorhub versions through update_weights_from_tensor.

SGLang's Engine.update_weights_from_tensor(named_tensors, load_format=...)
sends every tensor-parallel rank a list of named tensors; the rank's model
runner calls load_format(model, named_tensors) when load_format is one of the
server's --custom-weight-loader functions. This module is such a loader: the
trainer sends one small tensor, a reference to a tensorhub version, instead of
the weights; every rank fetches that version from whichever process holds it
(the trainer, or a rank that already has it), checks it, and only then calls
model.load_weights. A rank that cannot fetch loads nothing.

Server:

    python -m sglang.launch_server ... --custom-weight-loader tensorhub.adapters.sglang.load_weights

Trainer (after publishing `version` with tensorhub.torch.Publisher):

    from tensorhub.adapters import sglang as th_sglang
    engine.update_weights_from_tensor(
        named_tensors=th_sglang.reference(server_url, "policy", version),
        load_format=th_sglang.LOADER)

Each SGLang process keeps one tensorhub client and one set of staging buffers
per (server, model, shard, device); the staging buffers serve the version to
the other ranks until the next update.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from typing import Any

import torch

from .. import torch as tht
from .._common import LATEST, version_arg
from ..client import Client

__all__ = ["LOADER", "REFERENCE_NAME", "reference", "load_weights", "loaded_version", "close"]

LOADER = f"{__name__}.load_weights"
"""The load_format (and --custom-weight-loader entry) naming load_weights."""

REFERENCE_NAME = "__tensorhub__.reference"
"""The name of the one tensor a reference is made of."""

_lock = threading.Lock()
_staging: dict[tuple[str, str, int, str], tuple[Client, tht.Staging]] = {}
_loaded: dict[tuple[str, int], int] = {}


def reference(server_url: str, model: str, version: int = LATEST, *, shard: int = 0, staging_device: str = "cpu",
              timeout: float = 300.0) -> list[tuple[str, torch.Tensor]]:
    """The named_tensors for update_weights_from_tensor that make every rank
    load `version` of `model` from tensorhub: one uint8 tensor holding JSON."""
    version_arg(version)
    payload = json.dumps({"server_url": server_url, "model": model, "version": version, "shard": shard,
                          "staging_device": staging_device, "timeout": timeout}).encode()
    return [(REFERENCE_NAME, torch.frombuffer(bytearray(payload), dtype=torch.uint8))]


def _parse(named_tensors: Any) -> dict[str, Any]:
    items = list(named_tensors)
    if len(items) != 1 or not isinstance(items[0], (tuple, list)) or items[0][0] != REFERENCE_NAME:
        names = [item[0] if isinstance(item, (tuple, list)) else type(item).__name__ for item in items[:3]]
        raise ValueError(f"{LOADER} expects named_tensors = tensorhub.adapters.sglang.reference(...), one tensor "
                         f"named '{REFERENCE_NAME}'; got {len(items)} item(s) {names}: send the weights through "
                         "tensorhub and a reference through SGLang")
    tensor = items[0][1]
    try:
        ref: dict[str, Any] = json.loads(bytes(tensor.detach().cpu().contiguous().view(torch.uint8).numpy()))
        for key in ("server_url", "model", "version", "shard", "staging_device", "timeout"):
            ref[key]  # noqa: B018 - every key must be there
    except (ValueError, KeyError, RuntimeError) as e:
        raise ValueError(f"{LOADER}: the '{REFERENCE_NAME}' tensor is not a tensorhub reference: {e}") from e
    return ref


def _staging_for(ref: dict[str, Any]) -> tht.Staging:
    key = (ref["server_url"], ref["model"], int(ref["shard"]), str(ref["staging_device"]))
    with _lock:
        found = _staging.get(key)
        if found is None:
            host = socket.gethostname()
            client = Client(ref["server_url"], name=f"sglang-{host}-{os.getpid()}", labels={"host": host})
            found = client, tht.Staging(client, ref["model"], shard=key[2], device=key[3])
            _staging[key] = found
        return found[1]


def load_weights(model: Any, named_tensors: Any) -> None:
    """SGLang custom weight loader: fetches the referenced version, complete
    and verified, then calls model.load_weights with its (name, tensor) pairs.

    Raises:
        ValueError: named_tensors is not a reference.
        tensorhub errors (VersionNotFound, Unavailable, Timeout, DigestMismatch):
            nothing was loaded.
    """
    ref = _parse(named_tensors)
    staging = _staging_for(ref)
    weights = staging.fetch(int(ref["version"]), timeout=float(ref["timeout"]))
    model.load_weights(list(weights))
    with _lock:
        _loaded[(ref["model"], int(ref["shard"]))] = weights.version


def loaded_version(model: str = "policy", shard: int = 0) -> int | None:
    """The version this process loaded last for (model, shard), or None."""
    with _lock:
        return _loaded.get((model, shard))


def close() -> None:
    """Closes this process's tensorhub clients (they also close at exit)."""
    with _lock:
        entries = list(_staging.values())
        _staging.clear()
        _loaded.clear()
    for client, staging in entries:
        staging.close()
        client.close()
