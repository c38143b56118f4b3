//! The metadata server, embedded in this process.

use crate::error::{check, Result};
use crate::ffi::{created, cstring, init_config, millis, take_string};
use crate::sys;
use std::ffi::CStr;
use std::ptr::{self, NonNull};
use std::time::Duration;

/// Settings of an embedded server; `ServerConfig::default()` holds the
/// library's defaults (read from `th_server_config_init`, so they stay in step).
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// NNG URL; port 0 picks a free port (see [`Server::url`]).
    pub listen_url: String,
    /// A worker silent for this long loses its replicas.
    pub lease: Duration,
    /// Fan-out cap per source while other sources exist.
    pub max_readers_per_source: u32,
    /// Readers that serve read a shard in this many stripes, each relayed
    /// along its own tree (1: chains; 0: 8 once 24 workers are registered).
    pub stripes: u32,
}

impl Default for ServerConfig {
    fn default() -> Self {
        let raw = init_config(sys::th_server_config_init);
        ServerConfig {
            // SAFETY: the default listen_url is a static string.
            listen_url: unsafe { CStr::from_ptr(raw.listen_url) }.to_string_lossy().into_owned(),
            lease: Duration::from_millis(raw.lease_ms.into()),
            max_readers_per_source: raw.max_readers_per_source,
            stripes: raw.stripes,
        }
    }
}

/// A metadata server running on its own threads until dropped.
#[derive(Debug)]
pub struct Server {
    raw: NonNull<sys::th_server>,
    url: String,
}

// SAFETY: the server runs on its own threads; the only calls on the handle are
// th_server_url (read-only) and th_server_destroy, which needs `self` by value.
unsafe impl Send for Server {}
unsafe impl Sync for Server {}

impl Server {
    /// Starts a server listening on `listen_url`, e.g. `"tcp://127.0.0.1:0"`.
    pub fn new(listen_url: &str) -> Result<Server> {
        Server::with_config(&ServerConfig { listen_url: listen_url.to_owned(), ..ServerConfig::default() })
    }

    pub fn with_config(config: &ServerConfig) -> Result<Server> {
        let listen = cstring("listen_url", &config.listen_url)?;
        let mut raw_cfg = init_config(sys::th_server_config_init);
        raw_cfg.listen_url = listen.as_ptr();
        raw_cfg.lease_ms = millis(config.lease);
        raw_cfg.max_readers_per_source = config.max_readers_per_source;
        raw_cfg.stripes = config.stripes;
        let mut out = ptr::null_mut();
        // SAFETY: the config and the string it points to outlive the call.
        check(unsafe { sys::th_server_create(&mut out, &raw_cfg) })?;
        let raw = created(out, "th_server_create")?;
        // Copied once: the URL cannot change while the server lives.
        let url = unsafe { CStr::from_ptr(sys::th_server_url(raw.as_ptr())) }.to_string_lossy().into_owned();
        Ok(Server { raw, url })
    }

    /// The URL clients connect to, with the real port.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: created by th_server_create, destroyed once.
        unsafe { sys::th_server_destroy(self.raw.as_ptr()) }
    }
}

/// Asks the server at `server_url` for its state as JSON, without a client.
pub fn server_status(server_url: &str, timeout: Duration) -> Result<String> {
    let url = cstring("server_url", server_url)?;
    let mut json = ptr::null_mut();
    // A zero timeout would mean "the library default" in C; keep it a deadline.
    let ms = millis(timeout).max(1);
    check(unsafe { sys::th_server_status_json(url.as_ptr(), ms, &mut json) })?;
    // SAFETY: allocated by the library on success.
    Ok(unsafe { take_string(json) })
}
