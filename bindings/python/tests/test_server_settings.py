"""The embedded server's settings beyond the defaults, from Python: a cluster
token, the HTTP metrics endpoint and standby mode. (etcd: test_etcd.py.)"""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterator

import numpy as np
import pytest
from conftest import assert_same, connect, empty_like, weights

import tensorhub


@pytest.fixture
def no_token_in_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The library falls back to $TENSORHUB_TOKEN; these tests say theirs."""
    monkeypatch.delenv("TENSORHUB_TOKEN", raising=False)
    yield


def test_only_clients_with_the_cluster_token_are_served(no_token_in_env: None) -> None:
    with tensorhub.Server(token="correct horse battery staple") as server:
        with pytest.raises(tensorhub.AuthError, match="authentication"):
            connect(server, "intruder")
        with pytest.raises(tensorhub.AuthError, match="cluster token"):
            connect(server, "guesser", token="guess")
        with pytest.raises(tensorhub.AuthError):
            tensorhub.server_status(server.url, timeout=2.0)
        with connect(server, "pub", token="correct horse battery staple") as pub, \
                connect(server, "reader", token="correct horse battery staple") as reader:
            src = weights(1)
            pub.publish("m", 1, src)
            dst = empty_like(src)
            assert reader.fetch("m", into=dst, serve=False) == 1
            assert_same(src, dst)
            # The refused peers left no trace.
            assert sorted(w["name"] for w in pub.status()["workers"]) == ["pub", "reader"]


def test_a_client_with_a_token_refuses_a_server_without(no_token_in_env: None) -> None:
    with tensorhub.Server() as server:
        with pytest.raises(tensorhub.AuthError):
            connect(server, "careful", token="correct horse battery staple")


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as reply:
        assert reply.status == 200
        return reply.read().decode()


def _sample(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} is not in the metrics:\n{text}")


def test_the_metrics_endpoint_reports_what_happened() -> None:
    with tensorhub.Server() as plain:
        assert plain.metrics_url is None
    with tensorhub.Server(metrics="http://127.0.0.1:0") as server:
        url = server.metrics_url
        assert url is not None and url.startswith("http://127.0.0.1:") and url.endswith("/metrics"), url
        endpoint = url.removesuffix("/metrics")
        assert not endpoint.endswith(":0"), url
        with connect(server, "pub") as pub, connect(server, "reader") as reader:
            src = weights(2)
            pub.publish("m", 1, src)
            dst = empty_like(src)
            reader.fetch("m", into=dst, serve=False)
            text = _get(url)
            assert _sample(text, "tensorhub_versions_committed_total") == 1
            assert _sample(text, 'tensorhub_latest_version{model="m"}') == 1
            assert _sample(text, "tensorhub_fetch_seconds_count") == 1
            # The status document the live page polls, also through server_status.
            assert sorted(w["name"] for w in tensorhub.server_status(endpoint)["workers"]) == ["pub", "reader"]


def test_a_standby_asks_readers_to_ask_again_until_holders_arrive() -> None:
    # An active server knows it knows everything: an unknown model is an error at once.
    with tensorhub.Server() as active, connect(active, "reader", timeout=5.0) as reader:
        started = time.monotonic()
        with pytest.raises(tensorhub.VersionNotFound):
            reader.resolve("m")
        assert time.monotonic() - started < 2.5  # not a timing claim: the 5 s timeout would say Timeout
    # A standby cannot tell "unknown" from "not declared to me yet": the
    # reader keeps asking within its timeout, and the publisher that arrives
    # meanwhile answers it.
    with tensorhub.Server(standby=True) as standby, connect(standby, "reader", timeout=10.0) as reader, \
            connect(standby, "pub") as pub:
        got: list[int | BaseException] = []

        def resolve() -> None:
            try:
                got.append(reader.resolve("m"))
            except BaseException as e:  # noqa: BLE001 - checked below
                got.append(e)

        asking = threading.Thread(target=resolve)
        asking.start()
        time.sleep(0.3)
        assert not got, f"the standby answered before anything was published: {got}"
        pub.publish("m", 1, {"w": np.arange(1024, dtype=np.float32)})
        asking.join(timeout=15)
        assert got == [1]


def test_a_wait_for_a_version_ends_by_its_own_timeout() -> None:
    # Its queries are bounded by the wait too, not only by the client's 10 s
    # control timeout: a standby asks to ask again, a server that is gone
    # does not answer at all.
    with tensorhub.Server(standby=True) as standby, connect(standby, "reader", timeout=10.0) as reader:
        started = time.monotonic()
        with pytest.raises(tensorhub.Timeout):
            reader.wait_for_version("m", newer_than=0, timeout=0.3)
        assert time.monotonic() - started < 5.0  # not a timing claim: the 10 s control timeout held it before
    server = tensorhub.Server()
    reader = connect(server, "reader", timeout=10.0)
    server.close()
    started = time.monotonic()
    with pytest.raises((tensorhub.Unavailable, tensorhub.Timeout)):
        reader.wait_for_version("m", newer_than=0, timeout=0.3)
    assert time.monotonic() - started < 5.0
    reader.close()


def test_a_client_whose_server_is_gone_closes_at_once() -> None:
    # Its heartbeat, goodbye and releases used to wait a control timeout
    # (10 s) each for a server whose port refuses: 21 s for this publisher.
    server = tensorhub.Server()
    pub = connect(server, "pub", timeout=10.0)
    pub.publish("m", 1, weights(1))
    pub.publish("n", 1, weights(2))
    server.close()
    time.sleep(0.2)  # the connection's end is seen
    started = time.monotonic()
    pub.close()
    assert time.monotonic() - started < 5.0  # not a timing claim: 21 s before
