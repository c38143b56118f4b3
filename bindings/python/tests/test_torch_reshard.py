"""ReshardingReceiver: a version published by a TP=2 trainer read by TP=1,
TP=2 and TP=4 readers, row and column splits, bit for bit against the full
tensors, moving only the bytes each rank needs."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

import tensorhub
from _requires import require
from conftest import connect

torch = require("torch")
import tensorhub.torch as tht  # noqa: E402

SPLITS = {"qkv.weight": 0, "qkv.bias": 0, "out.weight": 1, "experts": 1, "norm.weight": None}


def full_state(seed: int) -> dict[str, "torch.Tensor"]:
    g = torch.Generator().manual_seed(seed)
    return {
        "qkv.weight": torch.randn(16, 12, generator=g).to(torch.bfloat16),   # column-parallel: rows split
        "qkv.bias": torch.randn(16, generator=g),
        "out.weight": torch.randn(12, 16, generator=g).to(torch.bfloat16),   # row-parallel: columns split
        "experts": torch.randn(3, 8, 6, generator=g),                        # a middle dimension
        "norm.weight": torch.randn(12, generator=g),                          # every shard holds it whole
    }


def part(t: "torch.Tensor", dim: int | None, size: int, rank: int) -> "torch.Tensor":
    return t if dim is None else t.chunk(size, dim)[rank].contiguous()


def shard_state(full: dict[str, "torch.Tensor"], size: int, rank: int) -> dict[str, "torch.Tensor"]:
    return {name: part(t, SPLITS[name], size, rank) for name, t in full.items()}


def same_bits(a: "torch.Tensor", b: "torch.Tensor") -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.contiguous().view(torch.uint8).equal(
        b.contiguous().view(torch.uint8))


class Tp2Trainer:
    """Two publisher ranks of one trainer, each publishing its shard in place."""

    def __init__(self, server: tensorhub.Server) -> None:
        self.clients = [connect(server, f"trainer-{r}") for r in range(2)]
        self.shards = [shard_state(full_state(1), 2, r) for r in range(2)]
        self.publishers = [tht.Publisher(c, "policy", s, shard=r, num_shards=2, chunk_bytes=4096)
                           for r, (c, s) in enumerate(zip(self.clients, self.shards))]

    def publish(self, version: int) -> dict[str, "torch.Tensor"]:
        full = full_state(version)
        for r, p in enumerate(self.publishers):
            with p.mutation():
                for name, t in shard_state(full, 2, r).items():
                    self.shards[r][name].copy_(t)
            p.publish(version)
        return full

    def close(self) -> None:
        for p in self.publishers:
            p.close()
        for c in self.clients:
            c.close()


@pytest.fixture
def trainer(server: tensorhub.Server) -> Iterator[Tp2Trainer]:
    t = Tp2Trainer(server)
    yield t
    t.close()


@pytest.mark.parametrize("tp_size", [1, 2, 4])
def test_readers_of_any_degree_get_their_part_bit_for_bit(server: tensorhub.Server, trainer: Tp2Trainer,
                                                          tp_size: int) -> None:
    full = trainer.publish(1)
    with connect(server, "rollout") as client:
        for rank in range(tp_size):
            reader = tht.ReshardingReceiver(client, "policy", SPLITS, tp_size=tp_size, tp_rank=rank)
            assert reader.fetch(timeout=30) == 1
            mine = reader.tensors
            assert list(mine) == list(full)
            for name, t in full.items():
                assert same_bits(mine[name], part(t, SPLITS[name], tp_size, rank)), (tp_size, rank, name)
            # Only what this rank holds moved: per shard read, exactly its bytes.
            moved = sum(s["bytes"] for s in reader.last_sync_stats)
            assert moved == sum(t.nbytes for t in mine.values())
            shards_read = [s["shard"] for s in reader.last_sync_stats]
            assert shards_read == ([0, 1] if tp_size == 1 else [rank * 2 // tp_size])


def test_the_newest_is_fetched_when_the_version_resolved_is_gone_before_its_fetch(
        server: tensorhub.Server, trainer: Tp2Trainer, monkeypatch: pytest.MonkeyPatch) -> None:
    # The trainer stepped (in place) past the version this reader resolved,
    # whose owned copies then went as no longer required.
    trainer.publish(1)
    full = trainer.publish(2)
    with connect(server, "rollout") as client:
        until = time.monotonic() + 10
        while True:
            try:
                client.resolve("policy", 1)
            except tensorhub.VersionNotFound:
                break
            assert time.monotonic() < until, "version 1 is still there"
            time.sleep(0.05)
        resolved = iter([1])  # what a resolve just before the step said
        real = client.resolve
        monkeypatch.setattr(client, "resolve", lambda model, version=tensorhub.LATEST: next(resolved, 0) or
                            real(model, version))
        reader = tht.ReshardingReceiver(client, "policy", SPLITS, tp_size=1, tp_rank=0)
        assert reader.fetch(timeout=30) == 2
        for name, t in full.items():
            assert same_bits(reader.tensors[name], t), name
        resolved = iter([1])  # by number: an error
        with pytest.raises(tensorhub.VersionNotFound):
            reader.fetch(1, timeout=30)


def test_tp4_rank_reads_half_of_one_tp2_shard(server: tensorhub.Server, trainer: Tp2Trainer) -> None:
    trainer.publish(1)
    shard_bytes = {n: t.nbytes for n, t in trainer.shards[1].items()}
    with connect(server, "rollout") as client:
        reader = tht.ReshardingReceiver(client, "policy", SPLITS, tp_size=4, tp_rank=3)
        reader.fetch(timeout=30)
        (stats,) = reader.last_sync_stats
        assert stats["shard"] == 1
        split = sum(b for n, b in shard_bytes.items() if SPLITS[n] is not None)
        assert stats["bytes"] == split // 2 + shard_bytes["norm.weight"]


def test_fills_a_module_in_place_and_follows_new_versions(server: tensorhub.Server, trainer: Tp2Trainer) -> None:
    class Tp4Rank(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = torch.nn.Linear(12, 4, dtype=torch.bfloat16)   # 16 output rows / 4
            self.qkv.bias = torch.nn.Parameter(torch.zeros(4))
            self.out = torch.nn.Linear(4, 12, bias=False, dtype=torch.bfloat16)  # 16 input columns / 4
            self.experts = torch.nn.Parameter(torch.zeros(3, 2, 6))
            self.norm = torch.nn.Module()
            self.norm.weight = torch.nn.Parameter(torch.zeros(12))

    module = Tp4Rank()
    ptrs = {n: t.data_ptr() for n, t in module.state_dict().items()}
    with connect(server, "rollout") as client:
        reader = tht.ReshardingReceiver(client, "policy", SPLITS, tp_size=4, tp_rank=2, target=module)
        for version in (1, 2):
            full = trainer.publish(version)
            assert reader.fetch(timeout=30) == version
            for name, t in module.state_dict().items():
                assert same_bits(t, part(full[name], SPLITS[name], 4, 2)), (version, name)
                assert t.data_ptr() == ptrs[name], name


def test_mismatches_and_uneven_splits_are_refused(server: tensorhub.Server, trainer: Tp2Trainer) -> None:
    trainer.publish(1)
    with connect(server, "rollout") as client:
        wrong = {n: torch.zeros_like(part(t, SPLITS[n], 4, 0)) for n, t in full_state(1).items()}
        wrong["out.weight"] = torch.zeros(12, 8, dtype=torch.bfloat16)  # the TP=2 shape, not TP=4
        reader = tht.ReshardingReceiver(client, "policy", SPLITS, tp_size=4, tp_rank=0, target=wrong)
        with pytest.raises(tensorhub.LayoutMismatch, match=r"'out.weight' is bfloat16\[12, 4\] for this rank"):
            reader.fetch(timeout=30)
        assert wrong["qkv.weight"].count_nonzero() == 0  # nothing written
        with pytest.raises(tensorhub.InvalidArgument, match="'qkv.weight': dimension 0 has 16 entries"):
            tht.ReshardingReceiver(client, "policy", SPLITS, tp_size=3, tp_rank=0).fetch(timeout=30)
        with pytest.raises(tensorhub.InvalidArgument, match="tp_rank 4 of tp_size 4"):
            tht.ReshardingReceiver(client, "policy", SPLITS, tp_size=4, tp_rank=4)
