"""Every failure comes back as the TensorHubError subclass of its status code,
carrying the library's message."""

from __future__ import annotations

import pickle
import time
import warnings

import numpy as np
import pytest
from conftest import assert_same, connect, empty_like, weights

import tensorhub
from tensorhub import _errors as errors_module
from tensorhub._errors import error_for


def test_every_code_has_its_class() -> None:
    expected = {
        -1: tensorhub.InvalidArgument, -2: tensorhub.VersionNotFound, -3: tensorhub.NotCommitted,
        -4: tensorhub.LayoutMismatch, -5: tensorhub.Conflict, -6: tensorhub.Timeout, -7: tensorhub.Unavailable,
        -8: tensorhub.TransportError, -9: tensorhub.ProtocolError, -10: tensorhub.OutOfMemory,
        -11: tensorhub.Closed, -12: tensorhub.Unsupported, -13: tensorhub.InternalError, -14: tensorhub.Retained,
        -15: tensorhub.AuthError,
    }
    for code, cls in expected.items():
        e = error_for(code, "what happened")
        assert type(e) is cls and cls.code == code
        assert isinstance(e, tensorhub.TensorHubError)
        assert (e.code, e.message) == (code, "what happened")
        assert str(e) == f"what happened ({e.status_name}, code {code})"
        copy = pickle.loads(pickle.dumps(e))  # crosses process boundaries intact
        assert (type(copy), copy.code, copy.message) == (cls, code, "what happened")
    assert type(error_for(-99, "from a newer library")) is tensorhub.TensorHubError
    assert isinstance(error_for(-6, ""), TimeoutError)
    assert isinstance(error_for(-1, ""), ValueError)
    assert error_for(-2, "").status_name == "not found"


def test_unknown_model_version_and_shard(pub: tensorhub.Client, reader: tensorhub.Client) -> None:
    src = weights(1)
    pub.publish("m", 1, src)
    dst = empty_like(src)
    with pytest.raises(tensorhub.VersionNotFound, match="model 'nope'") as info:
        reader.fetch("nope", into=dst)
    assert info.value.code == -2
    with pytest.raises(tensorhub.VersionNotFound, match="no version 7"):
        reader.fetch("m", 7, into=dst)
    with pytest.raises(tensorhub.VersionNotFound):
        reader.resolve("nope")
    with pytest.raises(tensorhub.InvalidArgument, match="shard 5 is out of range"):
        reader.fetch("m", 1, into=dst, shard=5)


def test_not_committed_until_every_shard_is_published(pub: tensorhub.Client, reader: tensorhub.Client) -> None:
    shard0, shard1 = weights(1, (64,)), weights(2, (64,))
    pub.publish("tp", 1, shard0, shard=0, num_shards=2)
    with pytest.raises(tensorhub.NotCommitted, match="1 of 2 shards"):
        reader.fetch("tp", 1, into=empty_like(shard0))
    with pytest.raises(tensorhub.NotCommitted):
        reader.resolve("tp", 1)
    pub.publish("tp", 1, shard1, shard=1, num_shards=2)
    dst = empty_like(shard1)
    assert reader.fetch("tp", into=dst, shard=1) == 1
    np.testing.assert_array_equal(dst["layers.0.weight"], shard1["layers.0.weight"])


def test_layout_mismatch_names_the_tensor(pub: tensorhub.Client, reader: tensorhub.Client) -> None:
    src = weights(3)
    pub.publish("m", 1, src)
    smaller = empty_like(src)
    smaller["layers.0.weight"] = np.zeros(999, np.float32)
    with pytest.raises(tensorhub.LayoutMismatch, match="'layers.0.weight' has 4000 bytes, 3996 given"):
        reader.fetch("m", into=smaller)
    fewer = dict(list(empty_like(src).items())[:-1])
    with pytest.raises(tensorhub.LayoutMismatch, match="5 tensors, 4 given"):
        reader.fetch("m", into=fewer)
    retyped = empty_like(src)
    retyped["mask"] = np.zeros(17, np.uint8)
    with pytest.raises(tensorhub.LayoutMismatch, match="uint8 given"):
        reader.fetch("m", into=retyped)
    reordered = dict(reversed(list(empty_like(src).items())))
    with pytest.raises(tensorhub.LayoutMismatch):
        reader.fetch("m", into=reordered)


def test_conflicting_publish(pub: tensorhub.Client, reader: tensorhub.Client) -> None:
    src = weights(4)
    pub.publish("m", 2, src)
    with pytest.raises(tensorhub.Conflict, match="another layout"):
        reader.publish("m", 2, weights(4, (5,)))
    with pytest.raises(tensorhub.Conflict, match="older than the latest committed version 2"):
        pub.publish("m", 1, src)


def test_invalid_arguments(pub: tensorhub.Client) -> None:
    src = weights(5)
    with pytest.raises(tensorhub.InvalidArgument, match="model name"):
        pub.publish("", 1, src)
    with pytest.raises(tensorhub.InvalidArgument, match="appears twice"):
        pub.publish("m", 1, [("a", src["mask"]), ("a", src["mask"])])
    with pytest.raises(tensorhub.InvalidArgument, match="chunk size"):
        pub.publish("m", 1, src, chunk_bytes=100)
    with pytest.raises(tensorhub.InvalidArgument, match="not C-contiguous"):
        pub.publish("m", 1, {"t": np.zeros((4, 4)).T})
    with pytest.raises(tensorhub.InvalidArgument, match="version must be"):
        pub.resolve("m", -1)
    with pytest.raises(tensorhub.InvalidArgument, match="timeout"):
        pub.fetch("m", into=src, timeout=-1)


def test_unreachable_server_is_unavailable_within_the_timeout() -> None:
    t0 = time.monotonic()
    # Nothing listens on port 1: the message says why.
    with pytest.raises(tensorhub.Unavailable, match="tcp://127.0.0.1:1: Connection refused"):
        tensorhub.Client("tcp://127.0.0.1:1", timeout=0.3)
    with pytest.raises(tensorhub.Unavailable, match="cannot reach .*: Connection refused"):
        tensorhub.server_status("tcp://127.0.0.1:1", timeout=0.3)
    assert time.monotonic() - t0 < 3


def test_a_superseded_version_released_by_its_last_holder_is_gone(pub: tensorhub.Client,
                                                                   reader: tensorhub.Client) -> None:
    old, new = weights(6), weights(7)
    first = pub.publish("m", 1, old)
    pub.publish("m", 2, new)
    first.release()  # version 1 is no longer the newest: nothing keeps it
    with pytest.raises(tensorhub.VersionNotFound, match="no version 1"):
        reader.fetch("m", 1, into=empty_like(old))


def test_a_last_holder_that_leaves_makes_the_version_unavailable(server: tensorhub.Server,
                                                                 reader: tensorhub.Client) -> None:
    src = weights(8)
    with connect(server, "leaving") as leaving:
        leaving.publish("m", 1, src).release()  # the newest version: spilled, still readable
        dst = empty_like(src)
        assert reader.fetch("m", 1, into=dst, serve=False) == 1
    t0 = time.monotonic()
    with pytest.raises(tensorhub.Unavailable, match="no live holder"):
        reader.fetch("m", 1, into=dst)
    assert time.monotonic() - t0 < 2


def test_a_fetch_of_the_newest_version_moves_on_when_its_last_holder_leaves(server: tensorhub.Server,
                                                                            reader: tensorhub.Client) -> None:
    # The newest version when the fetch starts loses its only holder halfway,
    # while a newer one is published: the fetch delivers the newer one
    # rather than "no live holder" (a fetch of a given version still fails).
    old, new = weights(11, sizes=(16 << 20,)), weights(12, sizes=(16 << 20,))
    dst = empty_like(old)
    with connect(server, "leaving") as leaving, connect(server, "next") as nxt:
        leaving.publish("m", 1, old)
        moved = False
        shown: list[int] = []

        def halfway(done: int, total: int) -> None:
            nonlocal moved
            shown.append(done)
            if not moved and 0 < done < total:
                moved = True
                nxt.publish("m", 2, new)
                leaving.close()

        assert reader.fetch("m", into=dst, serve=False, progress=halfway, progress_interval=0) == 2
        assert moved, "the fetch was over before its holder could leave"
        assert_same(dst, new)
        assert shown == sorted(shown), "progress went back when the fetch started over"
        # The stats are the whole call's, not its last attempt's: the holder
        # that left failed, and the newer version took another plan.
        stats = reader.last_sync_stats
        assert stats is not None and stats["version"] == 2
        assert stats["failed_sources"] >= 1 and stats["replans"] >= 1, stats


def test_fetch_deadline_is_a_timeout(pub: tensorhub.Client, reader: tensorhub.Client) -> None:
    big = {"big": np.ones(32 << 20, np.uint8)}
    pub.publish("big", 1, big)
    # Connect the data plane first: when a fetch times out while UCX is still
    # wiring up its endpoints, tearing the clients down can abort the process
    # (UCX assertion "got REP message" in ucp_request.c).
    small = weights(9)
    pub.publish("small", 1, small)
    reader.fetch("small", into=empty_like(small), serve=False)
    with pytest.raises(tensorhub.Timeout) as info:
        reader.fetch("big", into={"big": np.empty(32 << 20, np.uint8)}, timeout=0.001)
    assert isinstance(info.value, TimeoutError)


def test_host_memory_declared_as_cuda_is_refused(pub: tensorhub.Client) -> None:
    """Unsupported without a usable GPU (or a library built without CUDA);
    with one, the pointer is checked and refused as not device memory."""
    class HostMemoryClaimingCuda:
        def __init__(self, a: np.ndarray) -> None:
            self.a = a
            self.__cuda_array_interface__ = {"shape": a.shape, "typestr": a.dtype.str, "strides": None,
                                             "data": (a.ctypes.data, False), "version": 3}

    with pytest.raises((tensorhub.Unsupported, tensorhub.InvalidArgument)) as info:
        pub.publish("gpu", 1, {"w": HostMemoryClaimingCuda(np.zeros(1024, np.float32))})
    if isinstance(info.value, tensorhub.InvalidArgument):
        assert "not CUDA device memory" in info.value.message
    else:
        assert "CUDA" in info.value.message


def test_retained_when_the_last_copy_cannot_be_given_up(server: tensorhub.Server, reader: tensorhub.Client) -> None:
    with connect(server, "strict", retention="fail") as strict:
        src = weights(7)
        replica = strict.publish("m", 1, src)  # the only copy of the newest version
        with pytest.raises(tensorhub.Retained, match="last complete copy"):
            replica.begin_mutation()
        with pytest.raises(tensorhub.Retained):
            replica.release()
        assert not replica.released  # nothing changed: it still serves
        reader.fetch("m", into=empty_like(src))  # a second complete copy lets it go
        replica.release()
        assert replica.released


def test_every_exception_is_exported() -> None:
    classes = {obj for obj in vars(errors_module).values()
               if isinstance(obj, type) and issubclass(obj, tensorhub.TensorHubError)}
    for cls in classes:
        assert getattr(tensorhub, cls.__name__) is cls and cls.__name__ in tensorhub.__all__


def holders(client: tensorhub.Client, model: str) -> dict[int, set[int]]:
    """version -> the workers the server routes readers of `model` to."""
    return {v["version"]: {r["worker_id"] for s in v["shards"] for r in s["replicas"]}
            for m in client.status()["models"] if m["name"] == model for v in m["versions"]}


def test_close_withdraws_every_replica_without_retention(server: tensorhub.Server, pub: tensorhub.Client,
                                                         reader: tensorhub.Client) -> None:
    # Retention "fail" refuses to release the only copy of the newest version;
    # closing the client withdraws it all the same (th_client_destroy).
    leaving = connect(server, "leaving", retention="fail")
    src = weights(9)
    replica = leaving.publish("m", 1, src)
    with pytest.raises(tensorhub.Retained):
        replica.release()
    pub.publish("n", 1, weights(10))
    assert leaving.fetch("n", into=empty_like(weights(10))) == 1  # a replica the client keeps serving
    assert holders(reader, "m")[1] == {leaving.worker_id}
    assert holders(reader, "n")[1] == {pub.worker_id, leaving.worker_id}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        leaving.close()
    assert replica.released and replica.tensors() == {}
    replica.release()  # the handle is gone already: nothing to do
    assert leaving.worker_id not in holders(reader, "m").get(1, set())
    assert holders(reader, "n")[1] == {pub.worker_id}
    with pytest.raises(tensorhub.Unavailable, match="no live holder"):
        reader.fetch("m", 1, into=empty_like(src), serve=False)


def test_a_spill_over_the_pools_cap_is_out_of_memory(server: tensorhub.Server, reader: tensorhub.Client) -> None:
    with connect(server, "capped", spill_pool=1 << 20) as capped:
        src = {"w": np.arange(1 << 20, dtype=np.float32)}  # 4 MiB: over the 1 MiB cap
        replica = capped.publish("m", 1, src)  # the only copy of the newest version
        with pytest.raises(tensorhub.OutOfMemory, match="cap of 1 MiB"):
            replica.begin_mutation()
        assert not replica.released
        into = {"w": np.zeros(1 << 20, np.float32)}
        reader.fetch("m", into=into)  # the mutation did not begin: it still serves
        assert np.array_equal(into["w"], src["w"])


def test_closed_client_raises_closed(server: tensorhub.Server) -> None:
    c = connect(server, "short-lived")
    c.close()
    for call in (lambda: c.resolve("m"), lambda: c.status(), lambda: c.publish("m", 1, weights(8)),
                 lambda: c.fetch("m", into=weights(8)), lambda: c.pin("m", 1), lambda: c.wait_for_version("m")):
        with pytest.raises(tensorhub.Closed, match="client is closed"):
            call()
