"""tensorhub.adapters.vllm against a stand-in for vLLM's worker that calls the
engine the way vLLM's does (vLLM itself is not installed here: it needs a GPU
and pins its own torch). The models are real transformers models."""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

import tensorhub
from _requires import require
from conftest import connect

torch = require("torch")
require("transformers")
from _engines import DEVICES, EngineModel, bits, build, logits, train_step  # noqa: E402
from tensorhub.adapters import vllm as th_vllm  # noqa: E402

# vLLM's WeightTransferEngineFactory, reduced to what a worker does with it:
# look the backend up by name, construct it with (config, vllm_config, device, model).
REGISTRY = {th_vllm.BACKEND: th_vllm.TensorHubWeightTransferEngine}


class Worker:
    """The weight-update part of a vLLM worker: it owns the engine and runs
    each phase on it, refusing phases out of order as vLLM's worker does."""

    def __init__(self, model: Any) -> None:
        config = SimpleNamespace(backend=th_vllm.BACKEND)  # WeightTransferConfig
        vllm_config = SimpleNamespace(parallel_config=SimpleNamespace(tensor_parallel_size=1),
                                      model_config=SimpleNamespace(model="tiny-llama"))
        self.model = model
        self.engine = REGISTRY[config.backend](config, vllm_config, model.device, model)
        self.active = False
        self.weight_version: str | None = None

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self.engine.init_transfer_engine(self.engine.parse_init_info(init_info))

    def start_weight_update(self) -> None:
        if self.active:
            raise RuntimeError("a weight update is already in progress")
        self.engine.start_weight_update()
        self.active = True

    def update_weights(self, update_info: dict[str, Any]) -> None:
        if not self.active:
            raise RuntimeError("update_weights outside start_weight_update / finish_weight_update")
        try:
            self.engine.update_weights(update_info)
        except BaseException:
            self.active = False
            raise

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        if not self.active:
            raise RuntimeError("finish_weight_update without start_weight_update")
        self.engine.finish_weight_update()
        self.active = False
        if weight_version is not None:
            self.weight_version = weight_version


class LLMClient:
    """vLLM's weight-sync client protocol (the four methods), fanned out to
    every worker like collective_rpc; arguments cross a process boundary in
    vLLM, so they go through JSON here."""

    def __init__(self, workers: list[Worker]) -> None:
        self.workers = workers
        self.calls: list[str] = []

    def _all(self, method: str, *args: Any, **kwargs: Any) -> None:
        self.calls.append(method)
        args, kwargs = json.loads(json.dumps([args, kwargs]))
        for w in self.workers:
            getattr(w, method)(*args, **kwargs)

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self._all("init_weight_transfer_engine", init_info)

    def start_weight_update(self) -> None:
        self._all("start_weight_update")

    def update_weights(self, update_info: dict[str, Any]) -> None:
        self._all("update_weights", update_info)

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self._all("finish_weight_update", weight_version=weight_version)


@pytest.fixture(params=["cpu"])
def workers(request: pytest.FixtureRequest) -> Iterator[list[Worker]]:
    ws = [Worker(build(10 + i, EngineModel, request.param)) for i in range(2)]
    yield ws
    for w in ws:
        w.engine.shutdown()


@pytest.mark.parametrize("workers", DEVICES, indirect=True)
def test_every_update_loads_the_trainers_weights_bit_for_bit(server, workers) -> None:
    device = str(workers[0].model.device.type)
    trainer = build(0, device=device)
    optimizer = torch.optim.AdamW(trainer.parameters(), lr=1e-2)
    llm = LLMClient(workers)
    info = th_vllm.TensorHubTrainerInitInfo(server_url=server.url, model="policy", rank=0, staging_device=device)
    sender = th_vllm.TensorHubTrainerEngine.trainer_init(info, client=llm, source=trainer)
    sender.attach(optimizer)
    try:
        for step in (1, 2, 3):
            train_step(trainer, optimizer, seed=step)
            assert sender.send_weights(version=step) == step
            want = bits(logits(trainer))
            for w in workers:
                assert bits(logits(w.model)) == want, f"worker differs at version {step}"
                assert (w.weight_version, w.engine.weight_version) == (str(step), step)
        assert llm.calls == ["init_weight_transfer_engine"] + ["start_weight_update", "update_weights",
                                                               "finish_weight_update"] * 3
    finally:
        sender.shutdown()


def test_a_version_that_cannot_be_fetched_loads_nothing(server, workers) -> None:
    trainer = build(0)
    sender = th_vllm.TensorHubTrainerEngine.trainer_init(
        th_vllm.TensorHubTrainerInitInfo(server_url=server.url, rank=0), client=LLMClient(workers), source=trainer)
    try:
        sender.send_weights(version=1)
        w = workers[0]
        before = bits(logits(w.model))
        w.start_weight_update()
        with pytest.raises(tensorhub.VersionNotFound, match="version 7"):
            w.update_weights({"version": 7})
        assert bits(logits(w.model)) == before and w.engine.weight_version == 1
        with pytest.raises(ValueError, match="Invalid update_info"):
            w.engine.update_weights({"versoin": 2})
        with pytest.raises(ValueError, match="Invalid init_info"):
            w.engine.parse_init_info({"url": server.url})
    finally:
        sender.shutdown()


def test_update_before_init_is_refused() -> None:
    w = Worker(build(1, EngineModel))
    w.start_weight_update()
    with pytest.raises(RuntimeError, match="before init_weight_transfer_engine"):
        w.update_weights({"version": 1})


def test_a_gathered_source_is_copied_and_other_ranks_only_iterate(server, workers) -> None:
    trainer = build(0)
    gathered: list[int] = []

    def full_tensors() -> Iterator[tuple[str, torch.Tensor]]:
        # What an FSDP trainer yields: each full tensor gathered on demand, a temporary.
        gathered.append(1)
        for name, p in trainer.named_parameters():
            yield name, p.detach().clone()

    llm = LLMClient(workers)
    other = th_vllm.TensorHubTrainerEngine.trainer_init(
        th_vllm.TensorHubTrainerInitInfo(server_url=server.url, rank=1), client=llm, source=full_tensors)
    sender = th_vllm.TensorHubTrainerEngine.trainer_init(
        th_vllm.TensorHubTrainerInitInfo(server_url=server.url, rank=0), client=llm, source=full_tensors)
    try:
        assert other.send_weights() is None and gathered == [1] and llm.calls == ["init_weight_transfer_engine"]
        assert sender.send_weights() == 1 and gathered == [1, 1]
        for w in workers:
            assert bits(logits(w.model)) == bits(logits(trainer))
    finally:
        sender.shutdown()
        other.shutdown()


class ExtendedWorker(th_vllm.TensorHubWorkerExtension):
    """A worker with the extension mixed in, as vLLM builds it from worker_extension_cls."""

    def __init__(self, model: Any) -> None:
        self.model_runner = SimpleNamespace(model=model)


def test_worker_extension_through_collective_rpc(server) -> None:
    trainer = build(0)
    ws = [ExtendedWorker(build(20 + i, EngineModel)) for i in range(2)]

    def collective_rpc(method: str, args: tuple[Any, ...] = ()) -> list[Any]:
        return [getattr(w, method)(*json.loads(json.dumps(args))) for w in ws]

    with connect(server, "trainer") as hub:
        import tensorhub.torch as tht

        publisher = tht.Publisher(hub, "policy", trainer, digest=True)
        publisher.publish(4)
        try:
            collective_rpc("tensorhub_init", (server.url, "policy"))
            assert collective_rpc("tensorhub_version") == [None, None]
            assert collective_rpc("tensorhub_update", (4,)) == [4, 4]
            assert collective_rpc("tensorhub_version") == [4, 4]
            for w in ws:
                assert bits(logits(w.model_runner.model)) == bits(logits(trainer))
        finally:
            collective_rpc("tensorhub_close")
            publisher.close()


@pytest.mark.skipif(not th_vllm.HAVE_VLLM, reason="vLLM is not installed: its base classes cannot be checked")
def test_the_engine_is_one_of_vllms() -> None:
    from vllm.distributed.weight_transfer.base import WeightTransferEngine
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory

    assert issubclass(th_vllm.TensorHubWeightTransferEngine, WeightTransferEngine)
    th_vllm.register()
    assert th_vllm.BACKEND in WeightTransferEngineFactory._registry


def test_the_package_registers_the_backend_as_a_vllm_plugin() -> None:
    import importlib
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    target = project["project"]["entry-points"]["vllm.general_plugins"]["tensorhub"]
    module, name = target.split(":")
    assert getattr(importlib.import_module(module), name) is th_vllm.register

