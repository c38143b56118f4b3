"""Defaults have one home, the TH_DEFAULT_* macros of tensorhub.h. ctypes
cannot see macros, so this binding never writes a default down: a setting
left at None keeps what th_*_config_init put there. These tests check that
the loaded library's *_config_init agrees with the header, and that no
setting with a header default has a default of its own here."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from _header import HEADER, run_c

import tensorhub
from tensorhub import _lib

# Every TH_DEFAULT_* macro: the config it belongs to, its field there, and the
# Python parameter that sets it (function, parameter name).
DEFAULTS = {
    "TH_DEFAULT_LISTEN_URL": ("server", "listen_url", (tensorhub.Server.__init__, "listen")),
    "TH_DEFAULT_LEASE_MS": ("server", "lease_ms", (tensorhub.Server.__init__, "lease_ms")),
    "TH_DEFAULT_MAX_READERS_PER_SOURCE": ("server", "max_readers_per_source",
                                          (tensorhub.Server.__init__, "max_readers_per_source")),
    "TH_DEFAULT_ETCD_PREFIX": ("server", "etcd_prefix", (tensorhub.Server.__init__, "etcd_prefix")),
    "TH_DEFAULT_ETCD_LEASE_MS": ("server", "etcd_lease_ms", (tensorhub.Server.__init__, "etcd_lease_ms")),
    "TH_DEFAULT_STRIPES": ("server", "stripes", (tensorhub.Server.__init__, "stripes")),
    "TH_DEFAULT_TIMEOUT_MS": ("client", "timeout_ms", (tensorhub.Client.__init__, "timeout")),
    "TH_DEFAULT_HEARTBEAT_MS": ("client", "heartbeat_ms", (tensorhub.Client.__init__, "heartbeat")),
    "TH_DEFAULT_CHUNK_TIMEOUT_MS": ("client", "chunk_timeout_ms", (tensorhub.Client.__init__, "chunk_timeout")),
    "TH_DEFAULT_MAX_INFLIGHT": ("client", "max_inflight", (tensorhub.Client.__init__, "max_inflight")),
    "TH_DEFAULT_RETENTION": ("client", "retention", (tensorhub.Client.__init__, "retention")),
    "TH_DEFAULT_MUTATION_WAIT_MS": ("client", "mutation_wait_ms", (tensorhub.Client.__init__, "mutation_wait")),
    "TH_DEFAULT_SPILL_POOL_BYTES": ("client", "spill_pool_bytes", (tensorhub.Client.__init__, "spill_pool")),
    "TH_DEFAULT_SPILL_AHEAD": ("client", "spill_ahead", (tensorhub.Client.__init__, "spill_ahead")),
    "TH_DEFAULT_COPY_THREADS": ("client", "copy_threads", (tensorhub.Client.__init__, "copy_threads")),
    "TH_DEFAULT_NUM_SHARDS": ("publish", "num_shards", (tensorhub.Client.publish, "num_shards")),
    "TH_DEFAULT_CHUNK_BYTES": ("publish", "chunk_bytes", (tensorhub.Client.publish, "chunk_bytes")),
    # Fetch progress is reported through a callback; its interval is the library's.
    "TH_DEFAULT_PROGRESS_INTERVAL_MS": ("fetch", "progress_interval_ms", None),
    "TH_DEFAULT_CHECKSUMS": ("publish", "checksums", (tensorhub.Client.publish, "checksums")),
    "TH_DEFAULT_VERIFY": ("fetch", "verify", (tensorhub.Client.fetch, "verify")),
}

CONFIGS = {
    "server": (_lib.ServerConfig, _lib.lib.th_server_config_init),
    "client": (_lib.ClientConfig, _lib.lib.th_client_config_init),
    "publish": (_lib.PublishConfig, _lib.lib.th_publish_config_init),
    "fetch": (_lib.FetchConfig, _lib.lib.th_fetch_config_init),
}


def header_defaults(tmp_path: Path) -> dict[str, str]:
    """Each TH_DEFAULT_* as the C compiler sees it, printed as text."""
    names = re.findall(r"#define\s+(TH_DEFAULT_\w+)", HEADER.read_text())
    assert set(names) == set(DEFAULTS), "a TH_DEFAULT_* was added or removed: update DEFAULTS"
    strings = ("TH_DEFAULT_LISTEN_URL", "TH_DEFAULT_ETCD_PREFIX")
    lines = [f'printf("{n} %s\\n", {n});' if n in strings
             else f'printf("{n} %llu\\n", (unsigned long long)({n}));' for n in names]
    out = run_c(tmp_path, "defaults", lines)
    return dict(line.split(" ", 1) for line in out.splitlines())


@pytest.mark.skipif(not HEADER.exists(), reason="the C header is not next to this binding")
def test_config_init_fills_in_the_headers_defaults(tmp_path: Path) -> None:
    for name, value in header_defaults(tmp_path).items():
        config, field, _ = DEFAULTS[name]
        mirror, init = CONFIGS[config]
        got = getattr(_lib.new_config(mirror, init), field)
        got = got.decode() if isinstance(got, bytes) else str(got)
        assert got == value, f"{name}: the library's th_{config}_config_init gives {got}, the header {value}"


def test_settings_with_a_header_default_have_none_of_their_own() -> None:
    for name, (_, _, parameter) in DEFAULTS.items():
        if parameter is None:
            continue
        function, argument = parameter
        default = inspect.signature(function).parameters[argument].default
        assert default is None, f"{function.__qualname__}({argument}=...) repeats {name}: it must default to None"
