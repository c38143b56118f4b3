//! The metadata server, embedded in this process.

use crate::error::{check, Result};
use crate::ffi::{copy_string, created, cstring, init_config, millis, opt_cstring, ptr_or, redacted, take_string};
use crate::sys;
use std::fmt;
use std::ptr::{self, NonNull};
use std::time::Duration;

/// Settings of an embedded server; `ServerConfig::default()` holds the
/// library's defaults (read from `th_server_config_init`, so they stay in step).
/// Change fields with struct update syntax:
/// `ServerConfig { standby: true, ..ServerConfig::default() }`.
#[derive(Clone)]
pub struct ServerConfig {
    /// NNG URL; port 0 picks a free port (see [`Server::url`]).
    pub listen_url: String,
    /// A worker silent for this long loses its replicas.
    pub lease: Duration,
    /// Fan-out cap per source while other sources exist.
    pub max_readers_per_source: u32,
    /// Cluster token: every message must then carry an HMAC-SHA256 under it,
    /// and peers without it fail with [`Status::Auth`](crate::Status::Auth).
    /// `None` (or empty): `$TENSORHUB_TOKEN` if set, else no authentication.
    /// `Debug` does not show it.
    pub token: Option<String>,
    /// Serve HTTP at this URL, e.g. `"http://0.0.0.0:9090"` (port 0: any free
    /// port): Prometheus metrics at `<url>/metrics`, a live page at `<url>/`
    /// and the status JSON at `<url>/api/status` (see [`Server::metrics_url`]).
    /// `None`: no HTTP endpoint.
    pub metrics_url: Option<String>,
    /// This server waits to take over from another (listed after it in the
    /// clients' server URLs). Until workers fail over to it, and for one lease
    /// after, it cannot tell "unknown" from "not re-declared yet", so such
    /// answers make clients ask again within their timeouts instead of failing.
    pub standby: bool,
    /// High availability: `"host:port[,host:port...]"` of etcd's client URLs
    /// (plain HTTP). Servers with the same endpoints and `etcd_prefix`
    /// campaign for leadership; only the leader serves, the others answer
    /// "not the leader". Clients then use the server URL
    /// `"etcd://<endpoints><prefix>"`. `None`: no etcd, a server of its own.
    pub etcd_endpoints: Option<String>,
    /// The keys this cluster uses in etcd; starts with '/'.
    pub etcd_prefix: String,
    /// The leader's etcd lease (whole seconds, at least 2 s): a dead leader is
    /// replaced within about this long.
    pub etcd_lease: Duration,
    /// The URL clients reach this server at, published in etcd. `None`: the
    /// bound URL, which then must not be a wildcard address (0.0.0.0).
    pub advertise_url: Option<String>,
    /// Readers that serve read a shard in this many stripes, each relayed
    /// along its own tree (1: chains; 0: 8 once 24 workers are registered).
    pub stripes: u32,
}

impl Default for ServerConfig {
    fn default() -> Self {
        let raw = init_config(sys::th_server_config_init);
        let ms = |v: u32| Duration::from_millis(v.into());
        ServerConfig {
            // SAFETY: the defaults are static strings (or NULL).
            listen_url: unsafe { copy_string(raw.listen_url) },
            lease: ms(raw.lease_ms),
            max_readers_per_source: raw.max_readers_per_source,
            token: None,
            metrics_url: None,
            standby: raw.standby != 0,
            etcd_endpoints: None,
            // SAFETY: as listen_url.
            etcd_prefix: unsafe { copy_string(raw.etcd_prefix) },
            etcd_lease: ms(raw.etcd_lease_ms),
            advertise_url: None,
            stripes: raw.stripes,
        }
    }
}

impl fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Destructured so that a new field cannot be left out unnoticed.
        let ServerConfig {
            listen_url,
            lease,
            max_readers_per_source,
            token,
            metrics_url,
            standby,
            etcd_endpoints,
            etcd_prefix,
            etcd_lease,
            advertise_url,
            stripes,
        } = self;
        f.debug_struct("ServerConfig")
            .field("listen_url", listen_url)
            .field("lease", lease)
            .field("max_readers_per_source", max_readers_per_source)
            .field("token", &redacted(token))
            .field("metrics_url", metrics_url)
            .field("standby", standby)
            .field("etcd_endpoints", etcd_endpoints)
            .field("etcd_prefix", etcd_prefix)
            .field("etcd_lease", etcd_lease)
            .field("advertise_url", advertise_url)
            .field("stripes", stripes)
            .finish()
    }
}

/// A metadata server running on its own threads until dropped.
#[derive(Debug)]
pub struct Server {
    raw: NonNull<sys::th_server>,
    url: String,
    metrics_url: Option<String>,
}

// SAFETY: the server runs on its own threads; the only calls on the handle are
// th_server_url and th_server_metrics_url (read-only, at creation) and
// th_server_destroy, which needs `self` by value.
unsafe impl Send for Server {}
unsafe impl Sync for Server {}

impl Server {
    /// Starts a server listening on `listen_url`, e.g. `"tcp://127.0.0.1:0"`.
    pub fn new(listen_url: &str) -> Result<Server> {
        Server::with_config(&ServerConfig { listen_url: listen_url.to_owned(), ..ServerConfig::default() })
    }

    pub fn with_config(config: &ServerConfig) -> Result<Server> {
        let listen = cstring("listen_url", &config.listen_url)?;
        let token = opt_cstring("token", &config.token)?;
        let metrics = opt_cstring("metrics_url", &config.metrics_url)?;
        let etcd_endpoints = opt_cstring("etcd_endpoints", &config.etcd_endpoints)?;
        let etcd_prefix = cstring("etcd_prefix", &config.etcd_prefix)?;
        let advertise = opt_cstring("advertise_url", &config.advertise_url)?;
        let mut raw_cfg = init_config(sys::th_server_config_init);
        raw_cfg.listen_url = listen.as_ptr();
        raw_cfg.lease_ms = millis(config.lease);
        raw_cfg.max_readers_per_source = config.max_readers_per_source;
        raw_cfg.token = ptr_or(&token, raw_cfg.token);
        raw_cfg.metrics_url = ptr_or(&metrics, raw_cfg.metrics_url);
        raw_cfg.standby = config.standby.into();
        raw_cfg.etcd_endpoints = ptr_or(&etcd_endpoints, raw_cfg.etcd_endpoints);
        raw_cfg.etcd_prefix = etcd_prefix.as_ptr();
        raw_cfg.etcd_lease_ms = millis(config.etcd_lease);
        raw_cfg.advertise_url = ptr_or(&advertise, raw_cfg.advertise_url);
        raw_cfg.stripes = config.stripes;
        let mut out = ptr::null_mut();
        // SAFETY: the config and the strings it points to outlive the call;
        // the library copies them.
        check(unsafe { sys::th_server_create(&mut out, &raw_cfg) })?;
        let raw = created(out, "th_server_create")?;
        // Copied once: the URLs cannot change while the server lives, and
        // these calls may not run concurrently with th_server_destroy.
        // SAFETY: a live server; the strings are valid until it is destroyed.
        let url = unsafe { copy_string(sys::th_server_url(raw.as_ptr())) };
        let metrics_url = unsafe { copy_string(sys::th_server_metrics_url(raw.as_ptr())) };
        Ok(Server { raw, url, metrics_url: Some(metrics_url).filter(|u| !u.is_empty()) })
    }

    /// The URL clients connect to, with the real port.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The URL of the Prometheus metrics, with the real port:
    /// `"http://<host>:<port>/metrics"` (the live page is at `/` and the
    /// status JSON at `/api/status` of the same host and port). `None` when
    /// [`ServerConfig::metrics_url`] was not set.
    pub fn metrics_url(&self) -> Option<&str> {
        self.metrics_url.as_deref()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: created by th_server_create, destroyed once.
        unsafe { sys::th_server_destroy(self.raw.as_ptr()) }
    }
}

/// Asks the server at `server_url` for its state as JSON, without a client.
/// `server_url` may also be an `"etcd://..."` URL (the leader answers) or a
/// server's HTTP endpoint (`"http://host:port"`, see
/// [`ServerConfig::metrics_url`]). A server with a cluster token needs it in
/// `$TENSORHUB_TOKEN`.
pub fn server_status(server_url: &str, timeout: Duration) -> Result<String> {
    let url = cstring("server_url", server_url)?;
    let mut json = ptr::null_mut();
    // A zero timeout would mean "the library default" in C; keep it a deadline.
    let ms = millis(timeout).max(1);
    check(unsafe { sys::th_server_status_json(url.as_ptr(), ms, &mut json) })?;
    // SAFETY: allocated by the library on success.
    Ok(unsafe { take_string(json) })
}
