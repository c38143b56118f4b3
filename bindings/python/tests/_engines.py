"""What the adapter tests share: the tiny transformers model and an engine-
style load_weights, as vLLM and SGLang models implement it (neither engine
runs on this machine: no GPU, and their wheels pin their own torch), and the
devices their main tests run on: the CPU, and the GPU where one is (the
engines' own case: the models, the staging buffers and the published
weights in device memory)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                 reason="no CUDA device"))]

PROMPT = torch.tensor([[1, 17, 42, 99, 7, 3], [5, 6, 7, 8, 9, 10]])


def config() -> LlamaConfig:
    return LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                       tie_word_embeddings=True, attn_implementation="eager")


class EngineModel(LlamaForCausalLM):
    """The model as an inference engine holds it: load_weights takes
    (name, tensor) pairs in checkpoint format and copies each into its
    parameter with the parameter's weight_loader, as vLLM's and SGLang's
    models do: the output layer tied to the embedding is skipped, and so are
    the rotary tables checkpoints sometimes carry; an unknown name is an error.
    Returns the names loaded."""

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        params = dict(self.named_parameters())
        loaded: set[str] = set()
        for name, tensor in weights:
            if "rotary_emb.inv_freq" in name:
                continue
            if name == "lm_head.weight" and self.config.tie_word_embeddings:
                continue
            if name not in params:
                raise KeyError(f"load_weights: the model has no parameter '{name}'")
            param = params[name]
            loader = getattr(param, "weight_loader", default_weight_loader)
            loader(param, tensor)
            loaded.add(name)
        return loaded


def default_weight_loader(param: torch.Tensor, loaded: torch.Tensor) -> None:
    if param.size() != loaded.size():
        raise ValueError(f"attempted to load weight {tuple(loaded.size())} into parameter {tuple(param.size())}")
    with torch.no_grad():
        param.data.copy_(loaded)


def build(seed: int, cls: type[LlamaForCausalLM] = LlamaForCausalLM, device: str = "cpu") -> Any:
    torch.manual_seed(seed)
    return cls(config()).to(device).eval()


def logits(model: Any) -> torch.Tensor:
    with torch.no_grad():
        return model(PROMPT.to(model.device)).logits


def bits(t: torch.Tensor) -> bytes:
    return t.detach().cpu().contiguous().numpy().tobytes()


def train_step(model: Any, optimizer: torch.optim.Optimizer, seed: int) -> None:
    batch = torch.randint(0, 256, (2, 8), generator=torch.Generator().manual_seed(seed)).to(model.device)
    model.train()
    model(batch, labels=batch).loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    model.eval()
