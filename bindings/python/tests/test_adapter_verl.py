"""tensorhub.adapters.verl against a stand-in for verl's checkpoint-engine
manager that drives the backend through a round the way verl's does (verl is
not installed here: it needs Ray and a GPU stack). The models are real
transformers models."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Iterator
from typing import Any

import pytest

from _requires import require

torch = require("torch")
require("transformers")
from _engines import DEVICES, EngineModel, bits, build, logits, train_step  # noqa: E402
from tensorhub.adapters import verl as th_verl  # noqa: E402


class ServerAdapter:
    """The rollout server's side: takes the engine's async stream of
    (name, tensor) pairs and loads them into the model."""

    def __init__(self, model: Any) -> None:
        self.model = model

    async def update_weights(self, weights: AsyncGenerator[tuple[str, torch.Tensor], None],
                             global_steps: int | None = None, wire_format: str = "named_tensors") -> None:
        assert wire_format == "named_tensors"
        self.model.load_weights([(name, tensor) async for name, tensor in weights])


class RolloutWorker:
    """verl's CheckpointEngineWorker: its engine's receive_weights() into its server adapter."""

    def __init__(self, engine: th_verl.TensorHubCheckpointEngine, model: Any) -> None:
        self.engine = engine
        self.adapter = ServerAdapter(model)

    async def update_weights(self, global_steps: int | None = None) -> None:
        await self.adapter.update_weights(self.engine.receive_weights(global_steps=global_steps),
                                          global_steps=global_steps,
                                          wire_format=getattr(self.engine, "wire_format", "named_tensors"))


async def update_weights(trainer: list[th_verl.TensorHubCheckpointEngine], rollouts: list[RolloutWorker],
                         per_tensor_param: Any, global_steps: int | None = None) -> dict[str, Any]:
    """CheckpointEngineManager.update_weights for disaggregated rollout:
    prepare every worker (trainer first), build the topology, init every
    worker with its slice of the kwargs, then every trainer worker's
    send_weights alongside every rollout worker's update, then finalize all."""
    engines = trainer + [w.engine for w in rollouts]
    metadata = [e.prepare() for e in engines]
    trainer_kwargs, rollout_kwargs = th_verl.TensorHubCheckpointEngine.build_topology(len(trainer), len(rollouts),
                                                                                      metadata)
    for group, kwargs in ((trainer, trainer_kwargs), ([w.engine for w in rollouts], rollout_kwargs)):
        for k, v in kwargs.items():
            assert len(v) == len(group), f"kwargs[{k}] must have one entry per worker"
        for i, e in enumerate(group):
            e.init_process_group(**{k: v[i] for k, v in kwargs.items()})
    results = await asyncio.gather(*[e.send_weights(per_tensor_param(), global_steps=global_steps) for e in trainer],
                                   *[w.update_weights(global_steps=global_steps) for w in rollouts])
    for e in engines:
        e.finalize()
    metrics: dict[str, Any] = {}
    for r in results[:len(trainer)]:
        metrics.update(r or {})
    return metrics


@pytest.fixture
def engines(server) -> Iterator[Any]:
    made: list[th_verl.TensorHubCheckpointEngine] = []

    def new(device: str = "cpu") -> th_verl.TensorHubCheckpointEngine:
        made.append(th_verl.TensorHubCheckpointEngine(bucket_size=1 << 20, server_url=server.url, model="policy",
                                                      device=device))
        return made[-1]

    yield new
    for e in made:
        e.close()


@pytest.mark.parametrize("device", DEVICES)
def test_rounds_move_the_trainers_weights_bit_for_bit(engines, device: str) -> None:
    model = build(0, device=device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    trainer = [engines(device), engines(device)]  # two trainer ranks: rank 0 sends, rank 1 only runs its gathers
    rollouts = [RolloutWorker(engines(device), build(40 + i, EngineModel, device)) for i in range(2)]
    gathers = []

    def per_tensor_param() -> Iterator[tuple[str, torch.Tensor]]:
        gathers.append(1)
        for name, p in model.named_parameters():
            yield name, p.detach().clone()  # a gathered full tensor: a temporary

    # verl passes the trainer's global step: rounds 1 and 2 without one, then steps 10 and 20.
    for round_, steps, version in ((1, None, 1), (2, None, 2), (3, 10, 10), (4, 20, 20)):
        train_step(model, optimizer, seed=round_)
        if round_ == 3:  # elastic scale-up: a new replica joins for this round
            rollouts.append(RolloutWorker(engines(device), build(50, EngineModel, device)))
        metrics = asyncio.run(update_weights(trainer, rollouts, per_tensor_param, global_steps=steps))
        assert metrics["tensorhub/version"] == version and metrics["tensorhub/publish_s"] > 0
        assert trainer[0].version == version and len(gathers) == 2 * round_
        for w in rollouts:
            assert w.engine.version == version
            assert bits(logits(w.adapter.model)) == bits(logits(model)), f"rollout differs in round {round_}"


def test_misuse_is_refused(server, engines) -> None:
    with pytest.raises(ValueError, match="server_url"):
        th_verl.TensorHubCheckpointEngine(bucket_size=1)
    e = engines()
    with pytest.raises(RuntimeError, match="not a trainer"):
        asyncio.run(e.send_weights(iter([])))
    with pytest.raises(ValueError, match="2 workers prepared, 1 \\+ 2 expected"):
        th_verl.TensorHubCheckpointEngine.build_topology(1, 2, [e.prepare(), e.prepare()])
    e.init_process_group(rank=0, role="trainer", version=1)

    async def receive() -> None:
        async for _ in e.receive_weights():
            pass

    with pytest.raises(RuntimeError, match="not a rollout"):
        asyncio.run(receive())


@pytest.mark.skipif(not th_verl.HAVE_VERL, reason="verl is not installed: its registry cannot be checked")
def test_registers_with_verl() -> None:
    from verl.checkpoint_engine.base import CheckpointEngine, CheckpointEngineRegistry

    assert issubclass(th_verl.TensorHubCheckpointEngine, CheckpointEngine)
    # Importing the module (verl's custom_backend_module) registered it.
    assert CheckpointEngineRegistry.get(th_verl.BACKEND) is th_verl.TensorHubCheckpointEngine
    th_verl.register()  # again: harmless
    engine = CheckpointEngineRegistry.new(th_verl.BACKEND, bucket_size=1 << 20, server_url="tcp://127.0.0.1:1")
    assert isinstance(engine, CheckpointEngine)


def test_canceling_a_rollouts_receive_ends_the_wait_it_left_in_a_thread(engines, monkeypatch) -> None:
    import tensorhub

    made: list[tensorhub.Cancel] = []

    class Recording(tensorhub.Cancel):
        def __init__(self) -> None:
            super().__init__()
            made.append(self)

    monkeypatch.setattr(th_verl, "Cancel", Recording)
    e = engines()
    e.init_process_group(rank=0, role="rollout", version=5)  # no trainer: version 5 never comes

    async def main() -> None:
        async def receive() -> None:
            async for _ in e.receive_weights():
                pass

        task = asyncio.create_task(receive())
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    started = time.monotonic()
    # asyncio.run returns once its executor's threads have: the wait the
    # canceled task left behind had 600 s (the engine's timeout) to go.
    asyncio.run(main())
    assert made and made[0].canceled
    assert time.monotonic() - started < 30
