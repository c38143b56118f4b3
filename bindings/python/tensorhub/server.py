"""The embedded metadata server."""

from __future__ import annotations

import ctypes
from typing import Any

from ._common import Handle, HandleOwner, close_at_exit, encode, to_ms, u32
from ._errors import check
from ._lib import ServerConfig, lib, new_config, take_json

__all__ = ["Server", "server_status"]


class Server(HandleOwner):
    """A tensorhub metadata server running on threads of this process.

    It only tracks who holds which version; no weight byte passes through it.
    Clients in this or other processes connect to ``server.url``. Closing it
    (``close()``, leaving a ``with`` block, or garbage collection) stops
    serving; clients then get Unavailable.

    Args:
        listen: NNG URL to listen on; port 0 picks a free port.
        lease_ms: a worker silent for this long loses its replicas.
        max_readers_per_source: fan-out cap per source while other sources exist.
        token: cluster token; when set, only peers with it are served
            (default $TENSORHUB_TOKEN).
        metrics: an HTTP URL, e.g. "http://0.0.0.0:9090" (port 0: any free
            port): serve Prometheus metrics at <url>/metrics (see
            ``metrics_url``), a live page at <url>/ and the status document
            at <url>/api/status. Default: no HTTP endpoint.
        standby: this server waits to take over from another (listed after
            it in the clients' server URLs). Until workers fail over to it,
            and for one lease after, it cannot tell "unknown" from "not
            re-declared yet", so such answers tell clients to ask again
            within their timeouts instead of failing.
        etcd: "host:port,..." of an etcd: campaign for leadership there and
            serve only while leading (high availability). Clients then use
            ``"etcd://<etcd>/<prefix>"`` as their server.
        etcd_prefix: the cluster's keys in etcd (default "/tensorhub").
        etcd_lease_ms: the leader's etcd lease; a dead leader is replaced
            within about this long.
        advertise: the URL clients reach this server at, published in etcd
            (default: the bound URL).
        stripes: readers that serve read a shard in this many stripes, each
            relayed along its own tree (1: chains; 0: 8 once 24 workers are
            registered, else chains; at most 11).

        Settings left at None take the library's defaults (TH_DEFAULT_* in
        tensorhub.h, read back from th_server_config_init): a free port on
        127.0.0.1, for instance.
    """

    def __init__(self, listen: str | None = None, lease_ms: int | None = None,
                 max_readers_per_source: int | None = None, token: str | None = None,
                 metrics: str | None = None, standby: bool = False,
                 etcd: str | None = None, etcd_prefix: str | None = None, etcd_lease_ms: int | None = None,
                 advertise: str | None = None, stripes: int | None = None) -> None:
        cfg = new_config(ServerConfig, lib.th_server_config_init)
        if listen is not None:
            cfg.listen_url = encode(listen, "listen")
        if lease_ms is not None:
            cfg.lease_ms = u32(lease_ms, "lease_ms")
        if max_readers_per_source is not None:
            cfg.max_readers_per_source = u32(max_readers_per_source, "max_readers_per_source")
        if token is not None:
            cfg.token = encode(token, "token")
        if metrics is not None:
            cfg.metrics_url = encode(metrics, "metrics")
        cfg.standby = 1 if standby else 0
        if etcd is not None:
            cfg.etcd_endpoints = encode(etcd, "etcd")
        if etcd_prefix is not None:
            cfg.etcd_prefix = encode(etcd_prefix, "etcd_prefix")
        if etcd_lease_ms is not None:
            cfg.etcd_lease_ms = u32(etcd_lease_ms, "etcd_lease_ms")
        if advertise is not None:
            cfg.advertise_url = encode(advertise, "advertise")
        if stripes is not None:
            cfg.stripes = u32(stripes, "stripes")
        out = ctypes.c_void_p()
        check(lib.th_server_create(ctypes.byref(out), ctypes.byref(cfg)))
        # Read once: th_server_url may not run concurrently with destroy.
        self._url: str = lib.th_server_url(out).decode()
        self._metrics_url: str | None = lib.th_server_metrics_url(out).decode() or None
        self._handle = Handle(out.value or 0, lib.th_server_destroy, "server")
        close_at_exit(self, order=1)

    @property
    def metrics_url(self) -> str | None:
        """The URL of the Prometheus metrics, "http://<host>:<real port>/metrics",
        or None when the server was started without ``metrics``."""
        return self._metrics_url

    def close(self) -> None:
        """Stops the server. Idempotent."""
        self._handle.close()

    def __repr__(self) -> str:
        return f"<tensorhub.Server {self._url}{' closed' if self.closed else ''}>"


def server_status(url: str, timeout: float = 5.0) -> dict[str, Any]:
    """The state of the server at `url` (workers, models, versions, replicas,
    reads), without a client: connects, asks, disconnects. `url` may also be
    the server's HTTP endpoint ("http://host:9090"), where the live page reads it.

    Raises:
        Unavailable: the server cannot be reached within `timeout` seconds.
    """
    out = ctypes.c_void_p()
    status = lib.th_server_status_json(encode(url, "url"), to_ms(timeout, "timeout", minimum=1), ctypes.byref(out))
    check(status)
    return take_json(out)
