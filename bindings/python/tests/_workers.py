"""Process entry points for test_multiprocess.py (spawned children import this
module by name, so it must not be a test module)."""

from __future__ import annotations

from typing import Any

import numpy as np

import tensorhub

MODEL = "policy"
SHAPES = {"embed": (256, 1024), "layers.0.weight": (1024, 512), "layers.1.weight": (777,), "head": (3, 5, 7)}


def model_weights(version: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(version)
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in SHAPES.items()}


def publisher(url: str, version: int, ready: Any, stop: Any) -> None:
    with tensorhub.Client(url, name="publisher", heartbeat=0.1) as client:
        client.publish(MODEL, version, model_weights(version), chunk_bytes=256 << 10)
        ready.put(client.worker_id)
        stop.wait(60)


def reader(url: str, index: int, version: int, results: Any, stop: Any) -> None:
    with tensorhub.Client(url, name=f"reader-{index}", heartbeat=0.1) as client:
        dst = {name: np.empty(shape, np.float32) for name, shape in SHAPES.items()}
        got = client.fetch(MODEL, into=dst)  # keeps serving `dst`
        expected = model_weights(version)
        ok = got == version and all(np.array_equal(dst[k], expected[k]) for k in SHAPES)
        results.put((index, client.worker_id, ok))
        stop.wait(60)
