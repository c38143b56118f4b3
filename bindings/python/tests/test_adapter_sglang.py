"""tensorhub.adapters.sglang against a stand-in for SGLang's engine and model
runner that dispatches update_weights_from_tensor the way SGLang's does
(SGLang itself is not installed here: it needs a GPU and pins its own torch).
The models are real transformers models."""

from __future__ import annotations

import importlib
import pickle
from collections.abc import Iterator
from typing import Any

import pytest

import tensorhub
from _requires import require
from conftest import connect

torch = require("torch")
require("transformers")
import tensorhub.torch as tht  # noqa: E402
from _engines import DEVICES, EngineModel, bits, build, logits, train_step  # noqa: E402
from tensorhub.adapters import sglang as th_sglang  # noqa: E402


def dynamic_import(path: str) -> Any:
    module, name = path.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


class ModelRunner:
    """One tensor-parallel rank: how SGLang's model runner applies
    update_weights_from_tensor. Tensors are moved to the rank's device first;
    then load_format picks the path: "direct", one of the server's
    --custom-weight-loader functions (called as loader(model, named_tensors)),
    or the model's own load_weights."""

    def __init__(self, model: Any, custom_weight_loader: list[str], device: str = "cpu") -> None:
        self.model = model
        self.custom_weight_loader = custom_weight_loader
        self.device = device

    def update_weights_from_tensor(self, named_tensors: list[tuple[str, Any]],
                                   load_format: str | None = None) -> tuple[bool, str]:
        named_tensors = [(name, tensor.to(self.device)) for name, tensor in named_tensors]
        if load_format == "direct":
            params = dict(self.model.named_parameters())
            with torch.no_grad():
                for name, tensor in named_tensors:
                    params[name].copy_(tensor)
        elif load_format in self.custom_weight_loader:
            dynamic_import(load_format)(self.model, named_tensors)
        elif load_format is None:
            self.model.load_weights(named_tensors)
        else:
            raise NotImplementedError(f"Unknown load_format={load_format}")
        return True, "Success"


class Engine:
    """SGLang's Engine.update_weights_from_tensor: the same named tensors,
    serialized once per tensor-parallel rank, each rank applying its copy."""

    def __init__(self, runners: list[ModelRunner]) -> None:
        self.runners = runners

    def update_weights_from_tensor(self, named_tensors: list[tuple[str, Any]], load_format: str | None = None,
                                   flush_cache: bool = True) -> tuple[bool, str]:
        serialized = [pickle.dumps(named_tensors) for _ in self.runners]
        results = [r.update_weights_from_tensor(pickle.loads(s), load_format) for r, s in zip(self.runners, serialized)]
        return all(ok for ok, _ in results), "; ".join(m for _, m in results)


@pytest.fixture(params=["cpu"])
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    device = request.param
    yield Engine([ModelRunner(build(30 + rank, EngineModel, device), [th_sglang.LOADER], device)
                  for rank in range(2)])
    th_sglang.close()


@pytest.mark.parametrize("engine", DEVICES, indirect=True)
def test_each_rank_loads_the_referenced_version_bit_for_bit(server, engine) -> None:
    device = engine.runners[0].device
    trainer = build(0, device=device)
    optimizer = torch.optim.AdamW(trainer.parameters(), lr=1e-2)
    with connect(server, "trainer") as hub:
        publisher = tht.Publisher(hub, "policy", trainer, digest=True)
        publisher.attach(optimizer)
        for version in (1, 2):
            train_step(trainer, optimizer, seed=version)
            publisher.publish(version)
            ok, message = engine.update_weights_from_tensor(
                th_sglang.reference(server.url, "policy", version, staging_device=device), load_format=th_sglang.LOADER)
            assert ok, message
            for runner in engine.runners:
                assert bits(logits(runner.model)) == bits(logits(trainer)), f"rank differs at version {version}"
            assert th_sglang.loaded_version("policy") == version
        # LATEST is a valid reference too.
        engine.update_weights_from_tensor(th_sglang.reference(server.url, "policy"), load_format=th_sglang.LOADER)
        assert th_sglang.loaded_version("policy") == 2
        publisher.close()


def test_the_loader_must_be_listed_on_the_server(server) -> None:
    runner = ModelRunner(build(1, EngineModel), custom_weight_loader=[])
    with pytest.raises(NotImplementedError, match="Unknown load_format"):
        runner.update_weights_from_tensor(th_sglang.reference(server.url, "policy", 1), th_sglang.LOADER)


def test_weights_instead_of_a_reference_are_refused(engine) -> None:
    weights = list(build(0).state_dict().items())[:2]
    with pytest.raises(ValueError, match="expects named_tensors = tensorhub.adapters.sglang.reference"):
        engine.update_weights_from_tensor(weights, load_format=th_sglang.LOADER)
    with pytest.raises(ValueError, match="is not a tensorhub reference"):
        engine.update_weights_from_tensor([(th_sglang.REFERENCE_NAME, torch.zeros(3, dtype=torch.uint8))],
                                          load_format=th_sglang.LOADER)


def test_a_version_that_cannot_be_fetched_loads_nothing(server, engine) -> None:
    with connect(server, "trainer") as hub:
        tht.Publisher(hub, "policy", build(0)).publish(1)
        before = [bits(logits(r.model)) for r in engine.runners]
        with pytest.raises(tensorhub.VersionNotFound):
            engine.update_weights_from_tensor(th_sglang.reference(server.url, "policy", 9),
                                              load_format=th_sglang.LOADER)
        assert [bits(logits(r.model)) for r in engine.runners] == before
        assert th_sglang.loaded_version("policy") is None
