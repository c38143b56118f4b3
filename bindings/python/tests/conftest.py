"""Shared fixtures. The tests exercise the source tree (bindings/python), not an
installed copy, and find the library through TENSORHUB_LIB or ../../build."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tensorhub  # noqa: E402

@pytest.fixture
def server() -> Iterator[tensorhub.Server]:
    with tensorhub.Server(lease_ms=2000) as s:
        yield s


def connect(server: tensorhub.Server | str, name: str, **kwargs: object) -> tensorhub.Client:
    """A client with short deadlines, so that failing tests fail fast."""
    options: dict[str, object] = {"timeout": 3.0, "heartbeat": 0.1}
    options.update(kwargs)
    return tensorhub.Client(server, name=name, **options)  # type: ignore[arg-type]


@pytest.fixture
def pub(server: tensorhub.Server) -> Iterator[tensorhub.Client]:
    with connect(server, "pub") as c:
        yield c


@pytest.fixture
def reader(server: tensorhub.Server) -> Iterator[tensorhub.Client]:
    with connect(server, "reader") as c:
        yield c


def weights(seed: int, sizes: tuple[int, ...] = (1000, 70000, 3)) -> dict[str, np.ndarray]:
    """A small state_dict of mixed dtypes whose content depends on `seed`."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for i, n in enumerate(sizes):
        out[f"layers.{i}.weight"] = rng.standard_normal(n).astype(np.float32)
    out["embed.bias"] = rng.integers(-100, 100, size=(4, 5), dtype=np.int64)
    out["mask"] = rng.integers(0, 2, size=17).astype(bool)
    return out


def empty_like(state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: np.zeros_like(v) for k, v in state.items()}


def assert_same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert list(a) == list(b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
