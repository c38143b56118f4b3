"""tensorhub.Cancel: a canceled token ends a fetch with Canceled (between
transfers too: tests/integration/cancel_test.cpp), the buffers can be
fetched into again, it ends a wait for a version, and a Prefetcher's,
Staging's or engine adapter's close ends a fetch stuck on a stopped holder
on another thread instead of waiting it out."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace

import _workers
import numpy as np
import pytest
from conftest import connect

import tensorhub


def weights(version: int, n: int = 4, size: int = 1 << 18) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(version)
    return {f"w{i}": rng.standard_normal(size).astype(np.float32) for i in range(n)}


def empty_like(w: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: np.zeros_like(v) for k, v in w.items()}


def test_the_token() -> None:
    token = tensorhub.Cancel()
    assert not token.canceled
    token.cancel()
    token.cancel()  # idempotent
    assert token.canceled
    assert tensorhub.Canceled.code == -16
    assert issubclass(tensorhub.Canceled, tensorhub.TensorHubError)


def test_a_child_token_is_canceled_with_its_parent_but_not_its_parent_with_it(pub: tensorhub.Client,
                                                                             reader: tensorhub.Client) -> None:
    w = weights(2)
    pub.publish("m", 1, w)
    mine = empty_like(w)
    shutdown = tensorhub.Cancel()
    one, two = tensorhub.Cancel(parent=shutdown), tensorhub.Cancel(parent=shutdown)
    one.cancel()
    assert one.canceled and not shutdown.canceled and not two.canceled
    with pytest.raises(tensorhub.Canceled):
        reader.fetch("m", into=mine, cancel=one)
    assert reader.fetch("m", into=mine, cancel=two) == 1
    grandchild = tensorhub.Cancel(parent=two)
    shutdown.cancel()
    del shutdown, two  # either may go first
    assert grandchild.canceled
    parent = tensorhub.Cancel()
    child = tensorhub.Cancel(parent)
    parent.cancel()
    assert child.canceled
    with pytest.raises(tensorhub.Canceled, match="canceled before its first read"):
        reader.fetch("m", into=mine, cancel=child)


def test_a_token_canceled_before_the_fetch_ends_it_before_its_first_read(pub: tensorhub.Client,
                                                                        reader: tensorhub.Client) -> None:
    w = weights(1)
    pub.publish("m", 1, w)
    mine = empty_like(w)
    token = tensorhub.Cancel()
    token.cancel()
    with pytest.raises(tensorhub.Canceled, match="canceled before its first read"):
        reader.fetch("m", into=mine, cancel=token)
    assert reader.fetch("m", into=mine) == 1
    assert all(np.array_equal(mine[k], w[k]) for k in w)


@contextlib.contextmanager
def stopped_holder(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A server whose only holder of _workers.MODEL version 1 is stopped
    (SIGSTOP): over tcp its CPU answers every read, so a fetch of it hangs
    until its chunk timeout. Yields the server's URL."""
    monkeypatch.setenv("UCX_TLS", "tcp")
    ctx = multiprocessing.get_context("spawn")
    ready, stop = ctx.Queue(), ctx.Event()
    with tensorhub.Server() as server:
        holder = ctx.Process(target=_workers.publisher, args=(server.url, 1, ready, stop))
        holder.start()
        try:
            ready.get(timeout=30)
            assert holder.pid is not None
            os.kill(holder.pid, signal.SIGSTOP)
            yield server.url
        finally:
            assert holder.pid is not None
            os.kill(holder.pid, signal.SIGCONT)
            stop.set()
            holder.join(30)
            if holder.is_alive():
                holder.kill()


def closing_ends_the_fetch(fetch: Callable[[], object], close: Callable[[], None]) -> BaseException | None:
    """Runs fetch() on a thread, stuck on the stopped holder, then close() on
    this one; returns what fetch() raised. Not a timing claim: without the
    cancel, close() waits out the 30 s chunk timeout of the stuck reads."""
    raised: list[BaseException | None] = []

    def run() -> None:
        try:
            fetch()
            raised.append(None)
        except BaseException as e:  # handed to the test
            raised.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(0.5)
    assert not raised, f"the fetch from a stopped holder ended: {raised}"
    started = time.monotonic()
    close()
    assert time.monotonic() - started < 15
    thread.join(15)
    assert not thread.is_alive() and raised
    return raised[0]


def test_closing_a_prefetcher_cancels_a_fetch_stuck_on_a_stopped_holder(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    import tensorhub.torch as tht

    with stopped_holder(monkeypatch) as url, tensorhub.Client(url, name="rollout", chunk_timeout=30.0) as client:
        module = {name: torch.zeros(shape) for name, shape in _workers.SHAPES.items()}
        prefetcher = tht.Prefetcher(client, _workers.MODEL, module)
        prefetcher.prefetch(1, wait=False, timeout=60.0)
        time.sleep(0.3)
        assert not prefetcher.ready, "the fetch from a stopped holder finished"
        started = time.monotonic()
        prefetcher.close()
        # Not a timing claim: without the cancel, close() waits out the
        # 30 s chunk timeout of the stuck reads.
        assert time.monotonic() - started < 15


def test_closing_a_staging_ends_its_fetch_on_another_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    import tensorhub.torch as tht

    with stopped_holder(monkeypatch) as url, tensorhub.Client(url, name="rollout", chunk_timeout=30.0) as client:
        staging = tht.Staging(client, _workers.MODEL)
        raised = closing_ends_the_fetch(lambda: staging.fetch(1, timeout=60.0), staging.close)
        assert isinstance(raised, tensorhub.Canceled), raised
        assert staging.version is None


def test_shutting_a_vllm_engine_down_mid_update_ends_its_fetch(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from tensorhub.adapters import vllm as th_vllm

    with stopped_holder(monkeypatch) as url:
        engine = th_vllm.TensorHubWeightTransferEngine(SimpleNamespace(backend=th_vllm.BACKEND), SimpleNamespace())
        engine.init_transfer_engine(th_vllm.TensorHubInitInfo(server_url=url, model=_workers.MODEL, timeout=60.0))
        engine.start_weight_update()
        raised = closing_ends_the_fetch(lambda: engine.receive_weights(th_vllm.TensorHubUpdateInfo(version=1)),
                                        engine.shutdown)
        assert isinstance(raised, tensorhub.Canceled), raised
        assert engine.weight_version is None


def test_a_wait_for_a_version_ends_when_its_token_is_canceled(reader: tensorhub.Client) -> None:
    token = tensorhub.Cancel()
    timer = threading.Timer(0.2, token.cancel)
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises(tensorhub.Canceled, match="canceled while waiting for a version of model 'm'"):
            reader.wait_for_version("m", timeout=60, cancel=token)
    finally:
        timer.cancel()
    # Not a timing claim: the token ended a wait that had a minute left.
    assert time.monotonic() - started < 30


def test_a_staging_fetch_canceled_raises_canceled_and_the_staging_fetches_again(pub: tensorhub.Client,
                                                                               reader: tensorhub.Client) -> None:
    torch = pytest.importorskip("torch")
    import tensorhub.torch as tht

    w = {k: torch.from_numpy(v) for k, v in weights(3).items()}
    tht.Publisher(pub, "m", w).publish(3)
    staging = tht.Staging(reader, "m")
    token = tensorhub.Cancel()
    token.cancel()
    with pytest.raises(tensorhub.Canceled, match="canceled before its first read"):
        staging.fetch(cancel=token)
    got = staging.fetch()
    assert got.version == 3
    assert all(torch.equal(t, w[n]) for n, t in got)
    staging.close()
