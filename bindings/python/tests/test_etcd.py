"""Metadata-server HA on etcd from Python: two embedded servers campaign in a
real etcd (started here), a client follows the leader through an etcd:// URL,
and a new leader takes over when the first one closes. Skipped without etcd
(Debian: etcd-server). Killing a leader and partitioning it are tested by
tests/system/ha_test.py."""

from __future__ import annotations

import base64
import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator

import numpy as np
import pytest
from conftest import assert_same, weights

import tensorhub

pytestmark = pytest.mark.skipif(shutil.which("etcd") is None, reason="needs etcd (Debian: etcd-server)")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def etcd() -> Iterator[str]:
    data = tempfile.mkdtemp(prefix="th-etcd-")
    client, peer = f"127.0.0.1:{_port()}", f"http://127.0.0.1:{_port()}"
    proc = subprocess.Popen(["etcd", "--name", "t", "--data-dir", data, "--listen-client-urls", f"http://{client}",
                             "--advertise-client-urls", f"http://{client}", "--listen-peer-urls", peer,
                             "--initial-advertise-peer-urls", peer, "--initial-cluster", f"t={peer}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", int(client.split(":")[1])), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        yield client
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(data, ignore_errors=True)


def _leader(*servers: tensorhub.Server) -> tensorhub.Server | None:
    """The one that answers: the others say they are not the leader."""
    for s in servers:
        try:
            tensorhub.server_status(s.url, timeout=1.0)
            return s
        except tensorhub.Unavailable as e:
            assert "not the leader" in str(e)
    return None


def test_clients_follow_the_leader(etcd: str) -> None:
    first = tensorhub.Server(etcd=etcd, etcd_lease_ms=2000)
    second = tensorhub.Server(etcd=etcd, etcd_lease_ms=2000)
    url = f"etcd://{etcd}/tensorhub"
    with tensorhub.Client(url, name="pub") as pub, tensorhub.Client(url, name="reader") as reader:
        src = weights(1)
        pub.publish("m", 1, src)
        assert tensorhub.server_status(url)["workers"]  # etcd:// works here too
        leader = _leader(first, second)
        assert leader is not None
        follower = second if leader is first else first
        dst = {k: np.zeros_like(v) for k, v in src.items()}
        assert reader.fetch("m", into=dst, serve=False) == 1
        assert_same(src, dst)
        # The leader resigns; the other server is elected at once and the
        # workers register there again, with what they hold.
        leader.close()
        deadline = time.time() + 30
        while _leader(follower) is None and time.time() < deadline:
            time.sleep(0.1)
        dst = {k: np.zeros_like(v) for k, v in src.items()}
        assert reader.fetch("m", 1, into=dst, serve=False) == 1
        assert_same(src, dst)
        pub.publish("m", 2, weights(2))
        assert reader.resolve("m") == 2
    first.close()
    second.close()


def test_calls_waiting_on_a_leader_that_left_move_to_the_next_at_once(etcd: str) -> None:
    """A call to a leader that is gone learns of the next one from etcd while
    it waits, not when its attempt runs out (half its timeout: 30 s here)."""
    said: list[str] = []
    tensorhub.set_log_handler(lambda _level, message: said.append(message))
    try:
        first = tensorhub.Server(etcd=etcd, etcd_lease_ms=2000)
        second = tensorhub.Server(etcd=etcd, etcd_lease_ms=2000)
        url = f"etcd://{etcd}/tensorhub"
        with tensorhub.Client(url, name="pub", timeout=60.0) as pub, \
                tensorhub.Client(url, name="reader", timeout=60.0) as reader:
            pub.publish("m", 1, weights(1))
            leader = _leader(first, second)
            assert leader is not None
            follower = second if leader is first else first
            leader.close()
            deadline = time.time() + 30
            while _leader(follower) is None and time.time() < deadline:
                time.sleep(0.1)
            started = time.monotonic()
            assert reader.resolve("m") == 1
            moved = [m for m in said if "etcd names" in m and "the leader now" in m]
            assert moved, f"no call moved on when etcd named the next leader (after {time.monotonic() - started:.1f} s): {said}"
        first.close()
        second.close()
    finally:
        tensorhub.set_log_handler(None)


def test_no_etcd_is_a_clear_error() -> None:
    with pytest.raises(tensorhub.Unavailable, match="no tensorhub server leads under /x in etcd"):
        tensorhub.Client(f"etcd://127.0.0.1:{_port()}/x", timeout=0.5)


def test_bad_etcd_settings_are_refused() -> None:
    with pytest.raises(tensorhub.InvalidArgument, match="must start with '/'"):
        tensorhub.Server(etcd="127.0.0.1:1", etcd_prefix="noslash")
    with pytest.raises(tensorhub.InvalidArgument, match="not host:port"):
        tensorhub.Server(etcd="nohost")
    with pytest.raises(tensorhub.InvalidArgument, match="advertise_url"):
        tensorhub.Server(listen="tcp://0.0.0.0:0", etcd="127.0.0.1:1")


def _etcd(endpoint: str, call: str, body: dict[str, str]) -> dict:
    request = urllib.request.Request(f"http://{endpoint}/v3/{call}", data=json.dumps(body).encode())
    return json.load(urllib.request.urlopen(request, timeout=5))


def _leader_record(endpoint: str) -> dict | None:
    kvs = _etcd(endpoint, "kv/range", {"key": base64.b64encode(b"/tensorhub/leader").decode()}).get("kvs")
    return json.loads(base64.b64decode(kvs[0]["value"])) if kvs else None


def test_a_leader_whose_key_is_deleted_ends_its_term(etcd: str) -> None:
    with tensorhub.Server(etcd=etcd, etcd_lease_ms=2000) as server:
        deadline = time.time() + 20
        while _leader_record(etcd) is None and time.time() < deadline:
            time.sleep(0.1)
        first = _leader_record(etcd)
        assert first is not None and first["url"] == server.url
        _etcd(etcd, "kv/deleterange", {"key": base64.b64encode(b"/tensorhub/leader").decode()})
        # The server notices within a renewal period, ends its term and, alone,
        # is elected again: a new term with a newer epoch.
        while time.time() < deadline:
            again = _leader_record(etcd)
            if again is not None and again["epoch"] > first["epoch"]:
                break
            time.sleep(0.1)
        else:
            pytest.fail("the server did not start a new term after its key was deleted")
        assert again["url"] == server.url
