"""Publish and fetch in one process: one embedded server, two clients."""

from __future__ import annotations

import gc
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_same, connect, empty_like, weights

import tensorhub


def test_version_and_latest() -> None:
    assert tensorhub.__version__.count(".") == 2
    assert tensorhub.LATEST == 2**64 - 1


def test_state_dict_round_trip(pub: tensorhub.Client, reader: tensorhub.Client) -> None:
    src = weights(1)
    with pub.publish("m", 1, src, chunk_bytes=64 << 10) as replica:
        assert (replica.version, replica.model, replica.shard) == (1, "m", 0)
        dst = empty_like(src)
        assert reader.fetch("m", into=dst) == 1
        assert_same(src, dst)
    assert replica.released
    replica.release()  # idempotent


def test_pairs_round_trip_and_explicit_version(pub: tensorhub.Client, reader: tensorhub.Client) -> None:
    src = weights(2)
    pub.publish("m", 7, list(src.items()))  # the client keeps the replica
    dst = empty_like(src)
    assert reader.fetch("m", 7, into=((k, v) for k, v in dst.items()), serve=False) == 7
    assert_same(src, dst)
    assert reader.resolve("m") == 7
    assert reader.resolve("m", 7) == 7


def test_published_arrays_are_kept_alive_by_the_replica(pub: tensorhub.Client, reader: tensorhub.Client) -> None:
    expected = weights(3)
    replica = pub.publish("m", 1, {k: v.copy() for k, v in expected.items()})
    gc.collect()  # the only references to the published copies are the replica's
    assert set(replica.tensors()) == set(expected)
    dst = empty_like(expected)
    reader.fetch("m", into=dst)
    assert_same(expected, dst)


def test_serving_readers_double_buffer(server: tensorhub.Server, pub: tensorhub.Client,
                                       reader: tensorhub.Client) -> None:
    buffers = [empty_like(weights(0)), empty_like(weights(0))]
    for version in (1, 2, 3):
        src = weights(version)
        replica = pub.publish("m", version, src, chunk_bytes=64 << 10)
        dst = buffers[version % 2]
        assert reader.fetch("m", into=dst) == version
        assert_same(src, dst)
        replica.release()  # from now on only the reader holds `version`
        # The reader serves the new version and no longer the previous one.
        with connect(server, f"late-{version}") as late:
            again = empty_like(src)
            assert late.fetch("m", into=again, serve=False) == version
            assert_same(src, again)
        status = reader.status()
        held = {v["version"]: [r["worker_id"] for s in v["shards"] for r in s["replicas"]]
                for m in status["models"] for v in m["versions"]}
        assert held.get(version) == [reader.worker_id]
        assert reader.worker_id not in held.get(version - 1, [])


def test_fetching_into_the_served_buffers_releases_them_first(pub: tensorhub.Client,
                                                             reader: tensorhub.Client) -> None:
    dst = empty_like(weights(0))
    for version in (1, 2):
        src = weights(version)
        pub.publish("m", version, src)
        assert reader.fetch("m", into=dst) == version
        assert_same(src, dst)
    reader.stop_serving("m")
    reader.stop_serving("m")  # nothing left: a no-op


def test_fetch_replica_is_owned_by_the_caller(pub: tensorhub.Client, reader: tensorhub.Client) -> None:
    src = weights(4)
    pub.publish("m", 1, src)
    dst = empty_like(src)
    version, replica = reader.fetch_replica("m", into=dst)
    with replica:
        assert (version, replica.version) == (1, 1)
        assert_same(src, dst)
    assert replica.released


def test_single_tensor_and_byte_range(pub: tensorhub.Client, reader: tensorhub.Client) -> None:
    src = weights(5)
    pub.publish("m", 1, src, chunk_bytes=64 << 10)
    one = np.empty_like(src["layers.1.weight"])
    assert reader.fetch_tensor("m", "layers.1.weight", one) == 1
    np.testing.assert_array_equal(one, src["layers.1.weight"])
    part = np.empty(5000, np.uint8)  # crosses a chunk boundary at an odd offset
    reader.fetch_tensor("m", "layers.1.weight", part, offset=100001)
    assert part.tobytes() == src["layers.1.weight"].tobytes()[100001:105001]
    with pytest.raises(tensorhub.VersionNotFound, match="'nope'"):
        reader.fetch_tensor("m", "nope", part)
    with pytest.raises(tensorhub.InvalidArgument, match="outside tensor"):
        reader.fetch_tensor("m", "layers.1.weight", part, offset=src["layers.1.weight"].nbytes - 10)


def test_status_and_server_status(server: tensorhub.Server, pub: tensorhub.Client) -> None:
    with connect(server, "labelled", labels={"dc": "eu", "rack": "r7"}) as a, \
            connect(server, "text-labels", labels="dc=us,gpu=3") as b:
        workers = {w["name"]: w for w in tensorhub.server_status(server.url)["workers"]}
        # The library adds host=<hostname> when it is not given.
        assert workers["labelled"]["labels"].items() >= {"dc": "eu", "rack": "r7"}.items()
        assert workers["text-labels"]["labels"].items() >= {"dc": "us", "gpu": "3"}.items()
        assert workers["pub"]["worker_id"] == pub.worker_id
        assert {w["worker_id"] for w in a.status()["workers"]} >= {a.worker_id, b.worker_id}
    with pytest.raises(tensorhub.InvalidArgument, match="neither may contain"):
        tensorhub.Client(server, labels={"a": "x,y"})


def test_clients_close_idempotently(server: tensorhub.Server) -> None:
    c = connect(server, "closing")
    replica = c.publish("m", 1, weights(6))
    assert "closing" in {w["name"] for w in tensorhub.server_status(server.url)["workers"]}
    c.close()
    c.close()
    assert c.closed and replica.released
    replica.release()  # after the client: still fine
    with pytest.raises(tensorhub.Closed, match="client is closed"):
        c.resolve("m")
    with pytest.raises(tensorhub.Closed):
        replica.begin_mutation()
    assert "closing" not in {w["name"] for w in tensorhub.server_status(server.url)["workers"]}
    with connect(server, "ctx") as d:
        pass
    assert d.closed
    d.__del__()  # the safety net after an explicit close is a no-op


def test_abandoned_client_is_closed_by_the_garbage_collector(server: tensorhub.Server) -> None:
    c = connect(server, "abandoned")
    c.publish("m", 1, weights(7))  # the replica refers back to the client: a cycle
    del c
    gc.collect()
    names = {w["name"] for w in tensorhub.server_status(server.url)["workers"]}
    assert "abandoned" not in names


def test_server_close_is_idempotent() -> None:
    s = tensorhub.Server()
    url = s.url
    assert url.startswith("tcp://127.0.0.1:") and not url.endswith(":0")
    s.close()
    s.close()
    assert s.closed
    with pytest.raises(tensorhub.Unavailable):
        tensorhub.server_status(url, timeout=0.3)


def test_concurrent_calls_from_threads(pub: tensorhub.Client, reader: tensorhub.Client) -> None:
    src = weights(8)
    pub.publish("m", 1, src)
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for _ in range(5):
                dst = empty_like(src)
                reader.fetch("m", into=dst, serve=False)
                assert_same(src, dst)
                # Each thread sees its own failure's message (th_last_error is thread-local).
                with pytest.raises(tensorhub.VersionNotFound, match=f"'missing-{i}'"):
                    reader.resolve(f"missing-{i}")
        except BaseException as e:  # noqa: BLE001 (reported by the main thread)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_close_waits_for_calls_in_flight(server: tensorhub.Server, pub: tensorhub.Client) -> None:
    pub.publish("m", 1, {"big": np.ones(8 << 20, np.uint8)})
    c = connect(server, "busy")
    done = threading.Event()
    result: list[object] = []

    def fetch() -> None:
        try:
            result.append(c.fetch("m", into={"big": np.empty(8 << 20, np.uint8)}))
        except tensorhub.TensorHubError as e:
            result.append(e)
        done.set()

    t = threading.Thread(target=fetch)
    t.start()
    time.sleep(0.001)
    c.close()  # must not free the client under the fetch
    t.join()
    assert done.is_set() and result and (result[0] == 1 or isinstance(result[0], tensorhub.Closed))


# --------------------------------------------------------------------------- #
# Describe, waiting for versions, pins and mutation.
# --------------------------------------------------------------------------- #


def test_describe(pub: tensorhub.Client, reader: tensorhub.Client) -> None:
    src = weights(9)
    pub.publish("m", 3, src, chunk_bytes=64 << 10)
    d = reader.describe("m")
    assert (d["model"], d["version"], d["shard"], d["num_shards"], d["chunk_bytes"]) == ("m", 3, 0, 1, 64 << 10)
    assert d["total_bytes"] == sum(a.nbytes for a in src.values())
    assert [t["name"] for t in d["tensors"]] == list(src)
    for t, a in zip(d["tensors"], src.values()):
        assert (tuple(t["shape"]), t["nbytes"], t["dtype"]) == (a.shape, a.nbytes, str(a.dtype))
        assert tensorhub.DType(t["dtype_id"]).itemsize == a.itemsize


def test_fetch_iter(pub: tensorhub.Client, reader: tensorhub.Client) -> None:
    src = weights(10)
    src["bf16"] = np.arange(6, dtype=np.uint16)
    pub.publish("m", 1, [(k, tensorhub.with_dtype(v, "bfloat16") if k == "bf16" else v) for k, v in src.items()])
    got = dict(reader.fetch_iter("m"))
    assert list(got) == list(src)
    for k, v in src.items():
        assert got[k].tobytes() == v.tobytes(), k
    with pytest.raises(tensorhub.InvalidArgument, match="numpy arrays live on the CPU"):
        reader.fetch_iter("m", device="cuda:0")


def test_wait_for_version(pub: tensorhub.Client, reader: tensorhub.Client) -> None:
    pub.publish("m", 1, weights(11))
    assert reader.wait_for_version("m", timeout=2) == 1
    timer = threading.Timer(0.2, lambda: pub.publish("m", 2, weights(12)))
    timer.start()
    t0 = time.monotonic()
    assert reader.wait_for_version("m", newer_than=1, timeout=5) == 2
    assert time.monotonic() - t0 < 3
    timer.join()
    assert reader.wait_for_version("m", newer_than=1) == 2  # timeout=None: no deadline
    with pytest.raises(tensorhub.Timeout, match="within 0.2 s"):
        reader.wait_for_version("m", newer_than=2, timeout=0.2)
    # Longer than one of the waits the binding makes (2 s each, so that
    # Ctrl-C is seen): the error names the whole timeout, not the last wait.
    t0 = time.monotonic()
    with pytest.raises(tensorhub.Timeout, match="newer than 2 was committed within 2.5 s"):
        reader.wait_for_version("m", newer_than=2, timeout=2.5)
    assert time.monotonic() - t0 >= 2.5


@pytest.mark.parametrize("scheme", ["ipc", "ws"])
def test_wait_for_version_on_other_transports(scheme: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    # Clients read the server's events over TCP or IPC; a server on another
    # transport (ws://) publishes none, its clients say so once, and waiting
    # still finds the commit by asking.
    if scheme == "ipc":
        listen = f"ipc://{tmp_path}/th"
    else:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            listen = f"ws://127.0.0.1:{s.getsockname()[1]}/th"
    with tensorhub.Server(listen=listen, lease_ms=2000) as server:
        with connect(server, "pub") as pub, connect(server, "reader") as reader:
            pub.publish("m", 1, weights(21))
            timer = threading.Timer(0.2, lambda: pub.publish("m", 2, weights(22)))
            timer.start()
            assert reader.wait_for_version("m", newer_than=1, timeout=5) == 2
            timer.join()
    warned = "going on without server events" in capfd.readouterr().err
    assert warned == (scheme == "ws")


def test_begin_mutation_spills_the_last_copy(pub: tensorhub.Client, reader: tensorhub.Client) -> None:
    src = weights(13)
    expected = {k: v.copy() for k, v in src.items()}
    replica = pub.publish("m", 1, src)  # the only copy of the newest version
    replica.begin_mutation()            # retention "spill": the library keeps a copy
    for a in src.values():
        a[...] = 0
    replica.release()
    dst = empty_like(expected)
    assert reader.fetch("m", into=dst) == 1
    assert_same(expected, dst)


def test_spill_ahead_keeps_the_version_the_trainer_overwrites(server: tensorhub.Server,
                                                              reader: tensorhub.Client) -> None:
    with connect(server, "ahead", spill_ahead=True) as trainer:
        for version in (1, 2):
            src = weights(20 + version)
            expected = {k: v.copy() for k, v in src.items()}
            replica = trainer.publish("m", version, src)  # the owned copy starts now
            time.sleep(0.05)                              # the next step's forward and backward
            replica.begin_mutation()                      # finds the copy made (or its rest)
            for a in src.values():
                a[...] = 0
            replica.release()
            dst = empty_like(expected)
            assert reader.fetch("m", version=version, into=dst) == version
            assert_same(expected, dst)


def test_pin_and_unpin(pub: tensorhub.Client, reader: tensorhub.Client) -> None:
    pub.publish("m", 1, weights(14))
    reader.pin("m", 1)
    reader.unpin("m", 1)
    with pytest.raises(tensorhub.VersionNotFound):
        reader.pin("unknown-model", 1)


def test_serving_reader_keeps_a_retained_previous_version(server: tensorhub.Server, pub: tensorhub.Client) -> None:
    buffers = [empty_like(weights(0)), empty_like(weights(0))]
    with connect(server, "strict-reader", retention="fail") as strict:
        with connect(server, "first-trainer") as first:
            first.publish("m", 1, weights(1))
            assert strict.fetch("m", into=buffers[0]) == 1
        # `first` left: strict-reader holds the only copy of version 1.
        pub.pin("m", 1)  # version 1 stays required
        pub.publish("m", 2, weights(2))
        # Releasing version 1 is refused, so the client keeps serving it from buffers[0] ...
        assert strict.fetch("m", into=buffers[1]) == 2
        holders = {v["version"]: {r["worker_id"] for s in v["shards"] for r in s["replicas"]}
                   for m in strict.status()["models"] for v in m["versions"]}
        assert strict.worker_id in holders[1] and strict.worker_id in holders[2]
        # ... and will not let a fetch overwrite those bytes.
        pub.publish("m", 3, weights(3))
        with pytest.raises(tensorhub.Retained):
            strict.fetch("m", into=buffers[0])
        pub.unpin("m", 1)
        assert strict.fetch("m", into=buffers[0]) == 3
        assert_same(weights(3), buffers[0])


def test_a_corrupt_holder_is_read_around_when_verifying(server: tensorhub.Server, pub: tensorhub.Client,
                                                         reader: tensorhub.Client) -> None:
    src = {"w": np.arange(1 << 18, dtype=np.float32)}  # 1 MiB, 16 chunks of 64 KiB
    pub.publish("m", 1, src, chunk_bytes=64 << 10)
    relayed = empty_like(src)
    reader.fetch("m", into=relayed)  # serves it on; preferred over the publisher
    relayed["w"][5 << 14] += 1.0  # chunk 5 changes behind the library's back
    with connect(server, "trusting") as trusting:
        got = empty_like(src)
        trusting.fetch("m", into=got, serve=False, verify="off")
        assert not np.array_equal(got["w"], src["w"])
    with connect(server, "careful") as careful:
        got = empty_like(src)
        careful.fetch("m", into=got, serve=False, verify="all")
        assert_same(src, got)
        assert careful.last_sync_stats["checksum_mismatches"] == 1
    with pytest.raises(tensorhub.InvalidArgument, match="verify"):
        reader.fetch("m", into=empty_like(src), verify="sometimes")  # type: ignore[arg-type]


def test_a_holder_reported_corrupt_withdraws_its_changed_replica(server: tensorhub.Server, pub: tensorhub.Client,
                                                                 reader: tensorhub.Client) -> None:
    src = {"w": np.arange(1 << 18, dtype=np.float32)}  # 16 chunks of 64 KiB
    published = pub.publish("m", 1, src, chunk_bytes=64 << 10)
    relayed = empty_like(src)
    _, replica = reader.fetch_replica("m", into=relayed)
    assert not replica.withdrawn
    relayed["w"][3 << 14] += 1.0  # chunk 3 changes behind the library's back
    with connect(server, "careful") as careful:
        careful.fetch("m", into=empty_like(src), serve=False, verify="all")
        assert careful.last_sync_stats["checksum_mismatches"] == 1
    # The report sends the reader to check its own copy at its next heartbeat.
    def holders() -> set[int]:
        return {r["worker_id"] for m in pub.status()["models"] for v in m["versions"] for s in v["shards"]
                for r in s["replicas"]}
    deadline = time.monotonic() + 10
    while (not replica.withdrawn or reader.worker_id in holders()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert replica.withdrawn
    assert not published.withdrawn
    assert reader.worker_id not in holders() and pub.worker_id in holders()
    with connect(server, "trusting") as trusting:  # only the publisher is left to read from
        got = empty_like(src)
        trusting.fetch("m", into=got, serve=False, verify="off")
        assert_same(src, got)
    replica.release()
    assert not replica.withdrawn  # released
