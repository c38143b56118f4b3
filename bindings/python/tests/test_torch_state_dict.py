"""tensorhub.torch: modules published in place, fetched into parameter storage,
staged for load_weights-style loaders; every mismatch named, nothing half-applied."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

import tensorhub
from _requires import require
from conftest import connect

torch = require("torch")
tht = require("tensorhub.torch")
nn = torch.nn


class Tiny(nn.Module):
    """Parameters of several dtypes, a persistent and a non-persistent buffer,
    and an output layer tied to the embedding."""

    def __init__(self, seed: int, dtype: torch.dtype = torch.float32, tied: bool = True, vocab: int = 50) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.embed = nn.Embedding(vocab, 16, dtype=dtype)
        self.proj = nn.Linear(16, 16, dtype=dtype)
        self.norm = nn.LayerNorm(16, dtype=dtype)
        self.head = nn.Linear(16, vocab, bias=False, dtype=dtype)
        if tied:
            self.head.weight = self.embed.weight
        self.register_buffer("steps", torch.zeros(3, dtype=torch.int64))
        self.register_buffer("scratch", torch.zeros(4), persistent=False)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g).to(dtype))
            self.steps.copy_(torch.randint(0, 100, (3,), generator=g))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(torch.relu(self.proj(self.embed(x)))))


def same(a: nn.Module | dict, b: nn.Module | dict) -> bool:
    sa = a.state_dict() if isinstance(a, nn.Module) else a
    sb = b.state_dict() if isinstance(b, nn.Module) else b
    return list(sa) == list(sb) and all(_bits(sa[k]).equal(_bits(sb[k])) for k in sa)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def snapshot(m: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in m.state_dict().items()}


@pytest.fixture
def clients(server: tensorhub.Server) -> Iterator[tuple[tensorhub.Client, tensorhub.Client]]:
    with connect(server, "trainer") as trainer, connect(server, "rollout") as rollout:
        yield trainer, rollout


def test_publish_serves_the_parameters_themselves(clients) -> None:
    trainer, rollout = clients
    model = Tiny(1)
    with tht.Publisher(trainer, "policy", model) as publisher:
        replica = publisher.publish(1)
        served = replica.tensors()
        assert served["proj.weight"] is model.proj.weight  # the Parameter, not a copy
        assert "scratch" not in served  # non-persistent buffers are not part of the state
        assert "head.weight" not in served and publisher.aliases == {"head.weight": "embed.weight"}
        desc = rollout.describe("policy")
        assert [t["name"] for t in desc["tensors"]] == list(served)
        assert publisher.version == 1


def test_receiver_fills_parameter_storage_in_place_and_serves_it(server, clients) -> None:
    trainer, rollout = clients
    src, dst = Tiny(1), Tiny(2)
    x = torch.tensor([[1, 2, 3, 4]])
    ptrs = {k: v.data_ptr() for k, v in dst.state_dict().items()}
    publisher = tht.Publisher(trainer, "policy", src)
    publisher.publish(7)
    receiver = tht.Receiver(rollout, "policy", dst)
    assert receiver.fetch(timeout=10) == 7 and receiver.version == 7
    assert same(src, dst)
    assert {k: v.data_ptr() for k, v in dst.state_dict().items()} == ptrs  # the same storage
    assert dst.head.weight is dst.embed.weight  # still tied: both names filled by one tensor
    assert torch.equal(src(x), dst(x))
    # The rollout now serves version 7: a third reader gets every byte from it
    # once the trainer stops serving.
    publisher.withdraw()
    with connect(server, "late") as late:
        mine = Tiny(3)
        assert tht.Receiver(late, "policy", mine, serve=False).fetch(timeout=10) == 7
        stats = late.last_sync_stats
        assert stats is not None and stats["bytes_from_replicas"] == stats["bytes"] > 0
    assert same(src, mine)
    receiver.close()


def test_bfloat16_and_float16_round_trip_bit_for_bit(clients) -> None:
    trainer, rollout = clients
    for dtype in (torch.bfloat16, torch.float16):
        src, dst = Tiny(4, dtype), Tiny(5, dtype)
        model = f"p-{dtype}"
        tht.Publisher(trainer, model, src).publish(1)
        tht.Receiver(rollout, model, dst).fetch(timeout=10)
        assert same(src, dst), dtype


MISMATCHES = {
    # name: (how the rollout's module differs, what the error must name)
    "dtype": (lambda: Tiny(2, dtype=torch.bfloat16), r"'proj\.weight' is published as float32\[16, 16\], the "
              r"module's is bfloat16\[16, 16\]"),
    "shape": (lambda: Tiny(2, vocab=51), r"'embed\.weight' is published as float32\[50, 16\], the module's is "
              r"float32\[51, 16\]"),
    "missing in module": (lambda: _without(Tiny(2), "norm"), r"'norm\.weight' \(float32\[16\]\) is published but "
                          "the module has no such tensor"),
    "extra in module": (lambda: _with_extra(Tiny(2)), r"the module's 'extra\.weight' \(float32\[2, 2\] on cpu\) is "
                        "not in the version"),
    "tied here, not there": (lambda: Tiny(2, tied=True), r"'head\.weight' is published on its own, but the module "
                             r"ties it to 'embed\.weight'"),
}


def _without(m: Tiny, child: str) -> Tiny:
    delattr(m, child)
    m.add_module(child, nn.Identity())
    return m


def _with_extra(m: Tiny) -> Tiny:
    m.extra = nn.Linear(2, 2, bias=False)
    return m


@pytest.mark.parametrize("case", list(MISMATCHES))
def test_mismatch_names_the_tensor_and_writes_nothing(clients, case: str) -> None:
    trainer, rollout = clients
    make, message = MISMATCHES[case]
    tht.Publisher(trainer, "policy", Tiny(1, tied=case != "tied here, not there")).publish(1)
    dst = make()
    before = snapshot(dst)
    receiver = tht.Receiver(rollout, "policy", dst)
    with pytest.raises(tensorhub.LayoutMismatch, match=message) as info:
        receiver.fetch(timeout=10)
    assert "version 1 of 'policy'" in str(info.value) and "nothing was written" in str(info.value)
    assert same(before, dst) and receiver.version is None
    # Staged, the same check runs before anything is fetched.
    with pytest.raises(tensorhub.LayoutMismatch, match=message):
        tht.Receiver(rollout, "policy", dst, staging="cpu").fetch(timeout=10)
    assert same(before, dst)


def test_not_strict_leaves_extra_local_tensors_alone(clients) -> None:
    trainer, rollout = clients
    src = Tiny(1)
    tht.Publisher(trainer, "policy", src).publish(1)
    dst = _with_extra(Tiny(2))
    extra = dst.extra.weight.detach().clone()
    tht.Receiver(rollout, "policy", dst, strict=False).fetch(timeout=10)
    assert torch.equal(dst.extra.weight, extra)
    assert same(src.state_dict(), {k: v for k, v in dst.state_dict().items() if not k.startswith("extra.")})


def test_a_destination_that_needs_a_copy_is_named(clients) -> None:
    trainer, rollout = clients
    tht.Publisher(trainer, "policy", Tiny(1)).publish(1)
    dst = Tiny(2)
    dst.proj.weight = nn.Parameter(torch.zeros(16, 16).t())  # same shape, not contiguous
    before = snapshot(dst)
    with pytest.raises(tensorhub.InvalidArgument, match=r"tensor 'proj\.weight' is not contiguous"):
        tht.Receiver(rollout, "policy", dst).fetch(timeout=10)
    assert same(before, dst)


def test_overlapping_views_and_reserved_names_are_refused(clients) -> None:
    trainer, _ = clients
    flat = torch.zeros(10)
    with pytest.raises(tensorhub.InvalidArgument, match="'a' and 'b' share memory"):
        tht.Publisher(trainer, "p", {"a": flat[:6], "b": flat[4:]}).publish(1)
    with pytest.raises(tensorhub.InvalidArgument, match="reserved"):
        tht.Publisher(trainer, "p", {tht.DIGEST_NAME: flat}).publish(1)
    with pytest.raises(tensorhub.InvalidArgument, match="'x' is a list, not a torch.Tensor"):
        tht.Publisher(trainer, "p", {"x": [1.0]}).publish(1)


def test_rename_maps_local_names_to_published_ones(clients) -> None:
    trainer, rollout = clients
    src = Tiny(1)
    wrapped = nn.Module()
    wrapped.module = src  # what DistributedDataParallel adds
    tht.Publisher(trainer, "policy", wrapped, rename=lambda n: n.removeprefix("module.")).publish(1)
    names = [t["name"] for t in rollout.describe("policy")["tensors"]]
    assert names == [n for n in src.state_dict() if n != "head.weight"]
    dst = Tiny(2)
    tht.Receiver(rollout, "policy", dst).fetch(timeout=10)
    assert same(src, dst)


def test_digests_catch_bytes_changed_outside_the_contract(server, clients) -> None:
    trainer, rollout = clients
    src = Tiny(1)
    # Without the library's chunk checksums, which would catch the change
    # first (as a source to read around) whenever they sample that chunk.
    publisher = tht.Publisher(trainer, "policy", src, digest=True, checksums=False)
    publisher.publish(1)
    assert rollout.describe("policy")["tensors"][-1]["name"] == tht.DIGEST_NAME
    dst = Tiny(2)
    receiver = tht.Receiver(rollout, "policy", dst)
    assert receiver.fetch(timeout=10) == 1 and same(src, dst)
    with torch.no_grad():
        src.proj.bias.add_(1)  # an in-place change without withdrawing: the contract is broken
    with pytest.raises(tht.DigestMismatch, match=r"differ from what its publisher digested, in 'proj\.bias'") as info:
        tht.Receiver(rollout, "policy", Tiny(3), serve=False).fetch(timeout=10)
    assert info.value.names == ("proj.bias",)
    with pytest.raises(tht.DigestMismatch):
        tht.Staging(rollout, "policy").fetch(timeout=10)
    # The rollout that verified version 1 is the only holder left; after
    # the trainer withdraws, readers verify again against the same digests.
    publisher.withdraw()
    with connect(server, "third") as third:
        mine = Tiny(3)
        tht.Receiver(third, "policy", mine).fetch(timeout=10)
        assert same(dst, mine)


def test_optimizer_steps_never_tear_a_concurrent_read(clients, server) -> None:
    """A reader fetches the newest version in a loop while the trainer runs
    optimizer steps on the published parameters: every version it receives
    passes its digests, whichever holder or spilled copy served it."""
    trainer, _ = clients
    model = Tiny(1)
    publisher = tht.Publisher(trainer, "policy", model, digest=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    publisher.attach(optimizer)
    publisher.publish(1)
    stop = threading.Event()
    got: list[int] = []
    errors: list[BaseException] = []

    def read() -> None:
        with connect(server, "reader") as reader:
            staging = tht.Staging(reader, "policy")
            while not stop.is_set():
                try:
                    got.append(staging.fetch(timeout=10).version)
                except BaseException as e:  # noqa: BLE001 - reported below
                    errors.append(e)
                    return

    thread = threading.Thread(target=read)
    thread.start()
    x = torch.tensor([[1, 2, 3]])
    for step in range(2, 30):
        model(x).sum().backward()
        optimizer.step()  # the hook withdraws the version first
        assert publisher.replica is None
        optimizer.zero_grad()
        publisher.publish(step)
        time.sleep(0.01)
    deadline = time.monotonic() + 10
    while (not got or got[-1] < 29) and not errors and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    thread.join(30)
    assert not errors, errors
    assert got and got == sorted(got) and got[-1] == 29 and len(set(got)) > 3


def test_a_holder_dying_mid_fetch_is_reported_and_staging_keeps_the_module_whole(server) -> None:
    src = Tiny(1, tied=False)
    # 64 MiB in 64 KiB chunks. On a one-sided lane a read covers as many
    # chunks as move in 0.5 ms (fetch_source.hpp), so after the first read
    # (one chunk) the next may cover a few MiB: with a small shard it could
    # take every remaining byte while the holder is still leaving (the
    # staging buffers can lie back to back in memory), and the fetch would
    # rightly succeed. Here most of the shard is read after the holder left.
    big = {f"w{i}": torch.randn(2 << 20) for i in range(8)}

    def run(staging: str | None) -> tuple[BaseException, Tiny, dict[str, torch.Tensor], tht.Receiver]:
        trainer = connect(server, "doomed")
        state = {**{k: v for k, v in src.state_dict().items()}, **big}
        tht.Publisher(trainer, "policy", state, chunk_bytes=64 << 10).publish(1)
        dst = {**{k: v.clone() for k, v in Tiny(2, tied=False).state_dict().items()}, **{k: torch.zeros(2 << 20) for k in big}}
        before = {k: v.clone() for k, v in dst.items()}
        with connect(server, "rollout", max_inflight=1, timeout=2.0) as rollout:
            receiver = tht.Receiver(rollout, "policy", dst, staging=staging)

            def kill(done: int, total: int) -> None:
                if 0 < done < total:
                    trainer.close()  # the only holder leaves with its memory

            with pytest.raises((tensorhub.Unavailable, tensorhub.TransportError, tensorhub.Timeout)) as info:
                receiver.fetch(timeout=20, progress=kill, progress_interval=0)
            assert trainer.closed
            return info.value, dst, before, receiver

    error, dst, before, receiver = run(staging=None)
    assert "may have been partly overwritten" in str(error) and receiver.version is None
    assert not same(before, dst), "the first chunk had landed: this is the torn case"
    error, dst, before, receiver = run(staging="cpu")
    assert same(before, dst), "a failed staged fetch must leave the module as it was"


def test_staging_hands_out_a_complete_version_as_pairs(clients) -> None:
    trainer, rollout = clients
    src = Tiny(1, dtype=torch.bfloat16)
    publisher = tht.Publisher(trainer, "policy", src, digest=True)
    optimizer = torch.optim.SGD(src.parameters(), lr=0.5)
    publisher.attach(optimizer)
    publisher.publish(1)
    staging = tht.Staging(rollout, "policy")
    weights = staging.fetch(timeout=10)
    assert weights.version == 1 and tht.DIGEST_NAME not in weights.names()
    assert weights.names() == [n for n in src.state_dict() if n != "head.weight"]
    first_ptrs = [t.data_ptr() for _, t in weights]

    dst = Tiny(2, dtype=torch.bfloat16)
    loaded = _load_weights(dst, weights)  # the shape of vLLM's model.load_weights(iterable)
    assert loaded == set(weights.names()) and same(src, dst)

    src(torch.tensor([[1, 2]])).float().sum().backward()
    optimizer.step()
    publisher.publish(2)
    weights = staging.fetch(timeout=10)
    assert weights.version == 2 and [t.data_ptr() for _, t in weights] == first_ptrs  # buffers reused
    _load_weights(dst, weights)
    assert same(src, dst)


def _load_weights(model: nn.Module, weights) -> set[str]:
    params = dict(model.state_dict(keep_vars=True))
    loaded = set()
    with torch.no_grad():
        for name, tensor in weights:
            params[name].copy_(tensor)
            loaded.add(name)
    return loaded


def test_staged_publisher_owns_what_it_serves(clients) -> None:
    trainer, rollout = clients
    publisher = tht.StagedPublisher(trainer, "policy", digest=True)

    def gathered(seed: int) -> Iterator[tuple[str, torch.Tensor]]:
        g = torch.Generator().manual_seed(seed)
        for i in range(5):
            yield f"layer.{i}", torch.randn(100, generator=g)  # a temporary, freed after the copy

    publisher.publish(1, gathered(1))
    first = {k: v.data_ptr() for k, v in publisher.buffers().items()}
    assert dict(tht.Staging(rollout, "policy").fetch(timeout=10))["layer.3"].equal(dict(gathered(1))["layer.3"])
    publisher.publish(2, gathered(2))
    assert {k: v.data_ptr() for k, v in publisher.buffers().items()} == first
    got = dict(tht.Staging(rollout, "policy").fetch(timeout=10))
    assert all(got[k].equal(v) for k, v in gathered(2))

    def broken() -> Iterator[tuple[str, torch.Tensor]]:
        yield "layer.0", torch.zeros(100)
        raise RuntimeError("gather failed")

    with pytest.raises(RuntimeError, match="gather failed"):
        publisher.publish(3, broken())
    assert publisher.version is None and rollout.resolve("policy") == 2


def test_a_new_layout_is_checked_again(clients) -> None:
    trainer, rollout = clients
    tht.Publisher(trainer, "policy", Tiny(1)).publish(1)
    dst = Tiny(2)
    receiver = tht.Receiver(rollout, "policy", dst)
    receiver.fetch(timeout=10)
    staging = tht.Staging(rollout, "policy")
    assert len(staging.fetch(timeout=10)) == 6  # embed, proj (2), norm (2), steps; head is tied
    grown = _with_extra(Tiny(1))
    tht.Publisher(trainer, "policy", grown).publish(2)
    before = snapshot(dst)
    with pytest.raises(tensorhub.LayoutMismatch, match=r"'extra\.weight' \(float32\[2, 2\]\) is published"):
        receiver.fetch(timeout=10)
    assert same(before, dst)
    weights = staging.fetch(timeout=10)  # new buffers for the new layout
    assert weights.version == 2 and "extra.weight" in weights.names()


def test_a_fetch_that_fails_before_writing_keeps_the_version(clients) -> None:
    trainer, rollout = clients
    src = Tiny(1)
    tht.Publisher(trainer, "policy", src).publish(3)
    receiver = tht.Receiver(rollout, "policy", Tiny(2))
    assert receiver.fetch(timeout=10) == 3
    with pytest.raises(tensorhub.VersionNotFound):
        receiver.fetch(9, timeout=10)
    assert receiver.version == 3
    assert receiver.fetch(timeout=10) == 3  # held and served already: nothing to do


def test_the_newest_is_fetched_when_the_version_resolved_is_gone_before_its_fetch(
        server: tensorhub.Server, clients, monkeypatch: pytest.MonkeyPatch) -> None:
    # A trainer that publishes faster than a rollout fetches: between the
    # receiver's resolve and its fetch, a newer version came and the only
    # holder of the one resolved let it go (no longer required), so the
    # server forgot it.
    trainer, rollout = clients
    with connect(server, "trainer-2") as second:
        first = tht.Publisher(trainer, "policy", Tiny(1))
        first.publish(1)
        newer = Tiny(3)
        tht.Publisher(second, "policy", newer).publish(2)
        first.withdraw()
        with pytest.raises(tensorhub.VersionNotFound):
            rollout.resolve("policy", 1)
        resolved = iter([1])  # what a resolve just before the withdrawal said
        real = rollout.resolve
        monkeypatch.setattr(rollout, "resolve", lambda model, version=tensorhub.LATEST: next(resolved, 0) or
                            real(model, version))
        dst = Tiny(2)
        receiver = tht.Receiver(rollout, "policy", dst)
        assert receiver.fetch(timeout=10) == 2
        assert same(dst, newer)
        # Asked for by number, a version that is gone is an error.
        resolved = iter([1])
        with pytest.raises(tensorhub.VersionNotFound):
            receiver.fetch(1, timeout=10)


def test_update_waits_for_a_newer_version(clients) -> None:
    trainer, rollout = clients
    src = Tiny(1)
    publisher = tht.Publisher(trainer, "policy", src)
    publisher.publish(1)
    receiver = tht.Receiver(rollout, "policy", Tiny(2))
    assert receiver.update(timeout=10) == 1
    timer = threading.Timer(0.3, lambda: (publisher.withdraw(), publisher.publish(5)))
    timer.start()
    t0 = time.monotonic()
    assert receiver.update(timeout=10) == 5 and time.monotonic() - t0 >= 0.25
    timer.join()
    with pytest.raises(tensorhub.Timeout):
        receiver.update(timeout=0.2)
