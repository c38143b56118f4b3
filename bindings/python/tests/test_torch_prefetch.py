"""Prefetcher: version v+1 lands in spare tensors on a background thread while
the module keeps v, in use and served; swap() makes v+1 the module's, and the
background fetch's errors surface there with the module untouched."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

import tensorhub
from _requires import require
from conftest import connect

torch = require("torch")
tht = require("tensorhub.torch")
nn = torch.nn


class Small(nn.Module):
    """bf16 and fp32 parameters, a buffer, and a head tied to the embedding."""

    def __init__(self, seed: int, vocab: int = 40) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.embed = nn.Embedding(vocab, 16, dtype=torch.bfloat16)
        self.proj = nn.Linear(16, 16)
        self.head = nn.Linear(16, vocab, bias=False, dtype=torch.bfloat16)
        self.head.weight = self.embed.weight
        self.register_buffer("steps", torch.zeros(3, dtype=torch.int64))
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g).to(p.dtype))
            self.steps.fill_(seed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.proj(self.embed(x).float())).to(torch.bfloat16))


def bits(m: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone().reshape(-1).view(torch.uint8) for k, v in m.state_dict().items()}


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return list(a) == list(b) and all(a[k].equal(b[k]) for k in a)


def holders(client: tensorhub.Client, version: int) -> set[int]:
    status = client.status()
    return {r["worker_id"] for m in status["models"] if m["name"] == "policy" for v in m["versions"]
            if v["version"] == version for s in v["shards"] for r in s["replicas"] if r["complete"]}


def wait_ready(prefetcher: tht.Prefetcher, seconds: float = 20) -> None:
    end = time.monotonic() + seconds
    while not prefetcher.ready and time.monotonic() < end:
        time.sleep(0.01)
    assert prefetcher.ready


class Trainer:
    def __init__(self, client: tensorhub.Client) -> None:
        self.model = Small(1)
        self.publisher = tht.Publisher(client, "policy", self.model)

    def step(self, version: int) -> dict[str, torch.Tensor]:
        with self.publisher.mutation(), torch.no_grad():
            for p in self.model.parameters():
                p.add_(1)
            self.model.steps.fill_(version)
        self.publisher.publish(version)
        return bits(self.model)


@pytest.fixture
def clients(server: tensorhub.Server) -> Iterator[tuple[tensorhub.Client, tensorhub.Client]]:
    with connect(server, "trainer") as trainer, connect(server, "rollout") as rollout:
        yield trainer, rollout


def test_pointer_swap_serves_v_while_v_plus_1_lands(clients) -> None:
    trainer_client, rollout = clients
    trainer = Trainer(trainer_client)
    v1 = trainer.step(1)
    module = Small(2)
    weight = module.proj.weight
    original = {k: t.data_ptr() for k, t in module.state_dict().items()}
    prefetcher = tht.Prefetcher(rollout, "policy", module)
    assert prefetcher.fetch(timeout=10) == 1 and prefetcher.version == 1
    assert same(bits(module), v1)
    assert module.proj.weight is weight  # the same Parameter objects, pointed at the spare set
    assert module.head.weight is module.embed.weight
    assert module.proj.weight.data_ptr() != original["proj.weight"]

    prefetcher.prefetch()  # waits for a version newer than 1
    time.sleep(0.2)
    assert prefetcher.pending and not prefetcher.ready
    v2 = trainer.step(2)
    wait_ready(prefetcher)
    # v2 has landed in the spare set; the module still holds v1 and serves it.
    assert same(bits(module), v1) and prefetcher.version == 1
    assert rollout.worker_id in holders(rollout, 1)
    assert rollout.worker_id in holders(rollout, 2)
    assert prefetcher.swap() == 2 and prefetcher.version == 2
    assert same(bits(module), v2)
    assert prefetcher.last_swap_s is not None and prefetcher.last_swap_s < 0.05
    assert prefetcher.last_sync_stats is not None and prefetcher.last_sync_stats["version"] == 2
    # The sets alternate: v2 landed in the module's original storage.
    assert {k: t.data_ptr() for k, t in module.state_dict().items()} == original
    x = torch.tensor([[1, 2, 3]])
    assert torch.equal(module(x), trainer.model(x))

    v3 = trainer.step(3)
    prefetcher.prefetch()
    assert prefetcher.swap(timeout=20) == 3 and same(bits(module), v3)
    prefetcher.close()
    trainer.publisher.close()


def test_copy_swap_keeps_the_modules_addresses(clients) -> None:
    trainer_client, rollout = clients
    trainer = Trainer(trainer_client)
    trainer.step(1)
    module = Small(2)
    ptrs = {k: t.data_ptr() for k, t in module.state_dict().items()}
    with tht.Prefetcher(rollout, "policy", module, swap="copy") as prefetcher:
        assert prefetcher.fetch(timeout=10) == 1
        assert same(bits(module), bits(trainer.model))
        for version in (2, 3):
            prefetcher.prefetch()
            want = trainer.step(version)
            assert prefetcher.swap(timeout=20) == version
            assert same(bits(module), want)
        assert {k: t.data_ptr() for k, t in module.state_dict().items()} == ptrs
    trainer.publisher.close()


def test_background_errors_surface_at_swap_and_leave_the_module_alone(clients) -> None:
    trainer_client, rollout = clients
    trainer = Trainer(trainer_client)
    v1 = trainer.step(1)
    module = Small(2)
    prefetcher = tht.Prefetcher(rollout, "policy", module)
    prefetcher.fetch(timeout=10)

    prefetcher.prefetch(99, wait=False)
    with pytest.raises(tensorhub.VersionNotFound):
        prefetcher.swap(timeout=20)
    assert same(bits(module), v1) and prefetcher.version == 1 and not prefetcher.pending

    # A version the module cannot take: checked before a byte lands.
    other = Small(3, vocab=41)
    trainer.publisher.close()
    with tht.Publisher(trainer_client, "policy", other) as publisher:
        publisher.publish(2)
        prefetcher.prefetch()
        with pytest.raises(tensorhub.LayoutMismatch, match="embed.weight"):
            prefetcher.swap(timeout=20)
    assert same(bits(module), v1) and prefetcher.version == 1
    prefetcher.close()


def test_one_prefetch_at_a_time_and_swap_waits_for_it(clients) -> None:
    trainer_client, rollout = clients
    trainer = Trainer(trainer_client)
    trainer.step(1)
    module = Small(2)
    prefetcher = tht.Prefetcher(rollout, "policy", module)
    with pytest.raises(tensorhub.InvalidArgument, match="call prefetch"):
        prefetcher.swap()
    with pytest.raises(tensorhub.InvalidArgument, match="swap must be"):
        tht.Prefetcher(rollout, "policy", Small(2), swap="move")
    prefetcher.fetch(timeout=10)
    prefetcher.prefetch()
    with pytest.raises(tensorhub.InvalidArgument, match="already pending"):
        prefetcher.prefetch()
    with pytest.raises(tensorhub.Timeout, match="still running"):
        prefetcher.swap(timeout=0.2)  # no newer version yet: the prefetch keeps waiting
    v2 = trainer.step(2)
    assert prefetcher.swap(timeout=20) == 2
    prefetcher.prefetch()  # waits for version 3, which never comes: close() stops it
    started = time.monotonic()
    prefetcher.close()
    assert time.monotonic() - started < 5
    assert same(bits(module), v2)
    trainer.publisher.close()

