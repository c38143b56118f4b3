//! The client: a worker's connection to the server and its data plane.

use crate::cancel::Cancel;
use crate::error::{check, Result};
use crate::ffi::{created, cstring, init_config, millis, opt_cstring, ptr_or, redacted, take_string, version_arg};
use crate::sys;
use std::fmt;
use std::ptr::{self, NonNull};
use std::time::Duration;

/// What a client does when a replica it mutates or releases is the last
/// complete copy of a still-required version (`th_retention`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Retention {
    /// Copy the bytes into library-owned memory and keep serving that copy.
    Spill,
    /// Wait up to `mutation_wait` for another replica to complete, then spill.
    Wait,
    /// Refuse with [`Status::Retained`](crate::Status::Retained).
    Fail,
}

impl Retention {
    fn raw(self) -> sys::th_retention {
        match self {
            Retention::Spill => sys::TH_RETAIN_SPILL,
            Retention::Wait => sys::TH_RETAIN_WAIT,
            Retention::Fail => sys::TH_RETAIN_FAIL,
        }
    }

    fn from_raw(raw: sys::th_retention) -> Retention {
        match raw {
            sys::TH_RETAIN_WAIT => Retention::Wait,
            sys::TH_RETAIN_FAIL => Retention::Fail,
            _ => Retention::Spill,
        }
    }
}

/// Settings of a client. [`ClientConfig::new`] fills in the library's defaults
/// (read from `th_client_config_init`); change fields with struct update
/// syntax: `ClientConfig { timeout, ..ClientConfig::new(url) }`.
#[derive(Clone)]
pub struct ClientConfig {
    /// E.g. `"tcp://10.0.0.1:7070"`; a comma-separated list fails over along
    /// it; `"etcd://h1:2379,h2:2379/tensorhub"` follows the leader etcd names
    /// under that prefix ([`ServerConfig::etcd_endpoints`](crate::ServerConfig::etcd_endpoints)).
    pub server_url: String,
    /// `None`: `"<hostname>-<pid>"`.
    pub worker_name: Option<String>,
    /// Topology such as "dc=eu,rack=r7,host=node12,gpu=0". `None`: `host=<hostname>`.
    pub labels: Option<String>,
    /// Deadline of control calls, and of connecting.
    pub timeout: Duration,
    pub heartbeat: Duration,
    /// A chunk read with no completion for this long fails its source.
    pub chunk_timeout: Duration,
    /// Chunk reads in flight per fetch (per stripe when striped).
    pub max_inflight: u32,
    pub retention: Retention,
    /// How long `begin_mutation` waits for reads in flight to drain.
    pub mutation_wait: Duration,
    /// The cluster token (see [`ServerConfig::token`](crate::ServerConfig::token)).
    /// `None` (or empty): `$TENSORHUB_TOKEN` if set. The library never logs
    /// it, and `Debug` does not show it.
    pub token: Option<String>,
    /// Host memory the library may hold for owned copies (spill); 0: no
    /// limit. A spill that does not fit fails with `Status::NoMemory`.
    pub spill_pool_bytes: u64,
    /// Make the copy a spill would need right after each publish, on a
    /// library thread: a `begin_mutation` after other work (the next step's
    /// forward and backward) does not wait for it.
    pub spill_ahead: bool,
    /// Threads that post one-sided reads into host memory (1 to 16). On one
    /// host each read is a copy made by the thread that posts it, so more
    /// threads read faster where cores are free.
    pub copy_threads: u32,
}

impl ClientConfig {
    pub fn new(server_url: impl Into<String>) -> ClientConfig {
        let raw = init_config(sys::th_client_config_init);
        let ms = |v: u32| Duration::from_millis(v.into());
        ClientConfig {
            server_url: server_url.into(),
            worker_name: None,
            labels: None,
            timeout: ms(raw.timeout_ms),
            heartbeat: ms(raw.heartbeat_ms),
            chunk_timeout: ms(raw.chunk_timeout_ms),
            max_inflight: raw.max_inflight,
            retention: Retention::from_raw(raw.retention),
            mutation_wait: ms(raw.mutation_wait_ms),
            token: None,
            spill_pool_bytes: raw.spill_pool_bytes,
            spill_ahead: raw.spill_ahead != 0,
            copy_threads: raw.copy_threads,
        }
    }
}

impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Destructured so that a new field cannot be left out unnoticed.
        let ClientConfig {
            server_url,
            worker_name,
            labels,
            timeout,
            heartbeat,
            chunk_timeout,
            max_inflight,
            retention,
            mutation_wait,
            token,
            spill_pool_bytes,
            spill_ahead,
            copy_threads,
        } = self;
        f.debug_struct("ClientConfig")
            .field("server_url", server_url)
            .field("worker_name", worker_name)
            .field("labels", labels)
            .field("timeout", timeout)
            .field("heartbeat", heartbeat)
            .field("chunk_timeout", chunk_timeout)
            .field("max_inflight", max_inflight)
            .field("retention", retention)
            .field("mutation_wait", mutation_wait)
            .field("token", &redacted(token))
            .field("spill_pool_bytes", spill_pool_bytes)
            .field("spill_ahead", spill_ahead)
            .field("copy_threads", copy_threads)
            .finish()
    }
}

/// A connected worker. Thread-safe: share it by reference (or `Arc`) between
/// threads. Dropping it withdraws every replica it still holds; the borrow
/// checker makes sure no [`Replica`](crate::Replica) outlives it.
#[derive(Debug)]
pub struct Client {
    raw: NonNull<sys::th_client>,
}

// SAFETY: the header documents every call taking a th_client as thread-safe;
// th_client_destroy (the exception) runs in Drop, which has exclusive access.
unsafe impl Send for Client {}
unsafe impl Sync for Client {}

impl Client {
    /// Connects with default settings.
    pub fn connect(server_url: &str) -> Result<Client> {
        Client::new(&ClientConfig::new(server_url))
    }

    /// Connects and registers with the server; fails with
    /// [`Status::Unavailable`](crate::Status::Unavailable) if it cannot be
    /// reached within `config.timeout`.
    pub fn new(config: &ClientConfig) -> Result<Client> {
        let url = cstring("server_url", &config.server_url)?;
        let name = opt_cstring("worker_name", &config.worker_name)?;
        let labels = opt_cstring("labels", &config.labels)?;
        let token = opt_cstring("token", &config.token)?;
        let mut raw = init_config(sys::th_client_config_init);
        raw.server_url = url.as_ptr();
        raw.worker_name = ptr_or(&name, raw.worker_name);
        raw.labels = ptr_or(&labels, raw.labels);
        raw.timeout_ms = millis(config.timeout);
        raw.heartbeat_ms = millis(config.heartbeat);
        raw.chunk_timeout_ms = millis(config.chunk_timeout);
        raw.max_inflight = config.max_inflight;
        raw.retention = config.retention.raw();
        raw.mutation_wait_ms = millis(config.mutation_wait);
        raw.token = ptr_or(&token, raw.token);
        raw.spill_pool_bytes = config.spill_pool_bytes;
        raw.spill_ahead = config.spill_ahead.into();
        raw.copy_threads = config.copy_threads;
        let mut out = ptr::null_mut();
        // SAFETY: the strings outlive the call; the library copies them.
        check(unsafe { sys::th_client_create(&mut out, &raw) })?;
        Ok(Client { raw: created(out, "th_client_create")? })
    }

    pub(crate) fn raw(&self) -> *mut sys::th_client {
        self.raw.as_ptr()
    }

    /// The id the server knows this worker by.
    pub fn worker_id(&self) -> u64 {
        unsafe { sys::th_client_worker_id(self.raw()) }
    }

    /// The committed version that `version` (`None`: the newest) names.
    pub fn resolve(&self, model: &str, version: Option<u64>) -> Result<u64> {
        let model = cstring("model", model)?;
        let mut out = 0;
        check(unsafe { sys::th_resolve(self.raw(), model.as_ptr(), version_arg(version), &mut out) })?;
        Ok(out)
    }

    /// Waits until `model` has a committed version newer than `newer_than`
    /// (0: any) and returns it; [`Status::Timeout`](crate::Status::Timeout)
    /// if none appears in time.
    pub fn wait_for_version(&self, model: &str, newer_than: u64, timeout: Duration) -> Result<u64> {
        self.wait_for_version_cancelable(model, newer_than, timeout, None)
    }

    /// [`wait_for_version`](Client::wait_for_version) that also ends, with
    /// [`Status::Canceled`](crate::Status::Canceled), within about 20 ms of
    /// `cancel`'s [`cancel`](Cancel::cancel) from any thread.
    pub fn wait_for_version_cancelable(
        &self,
        model: &str,
        newer_than: u64,
        timeout: Duration,
        cancel: Option<&Cancel>,
    ) -> Result<u64> {
        let model = cstring("model", model)?;
        let mut out = 0;
        let ms = millis(timeout);
        let token = cancel.map_or(ptr::null_mut(), Cancel::raw);
        // SAFETY: the strings and the token outlive the call.
        check(unsafe {
            sys::th_wait_for_version_cancelable(self.raw(), model.as_ptr(), newer_than, ms, token, &mut out)
        })?;
        Ok(out)
    }

    /// The layout of a shard as JSON (names, dtypes, shapes, sizes), so that
    /// a reader can allocate its buffers before fetching.
    pub fn describe(&self, model: &str, version: Option<u64>, shard: u32) -> Result<String> {
        let model = cstring("model", model)?;
        let mut json = ptr::null_mut();
        check(unsafe { sys::th_describe_json(self.raw(), model.as_ptr(), version_arg(version), shard, &mut json) })?;
        Ok(unsafe { take_string(json) })
    }

    /// The server's state as JSON.
    pub fn status(&self) -> Result<String> {
        let mut json = ptr::null_mut();
        check(unsafe { sys::th_status_json(self.raw(), &mut json) })?;
        Ok(unsafe { take_string(json) })
    }

    /// Keeps `(model, version)` required until [`unpin`](Client::unpin) or
    /// until this client is dropped.
    pub fn pin(&self, model: &str, version: u64) -> Result<()> {
        let model = cstring("model", model)?;
        check(unsafe { sys::th_pin(self.raw(), model.as_ptr(), version) })
    }

    pub fn unpin(&self, model: &str, version: u64) -> Result<()> {
        let model = cstring("model", model)?;
        check(unsafe { sys::th_unpin(self.raw(), model.as_ptr(), version) })
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // SAFETY: created by th_client_create; no Replica<'_> borrowing this
        // client can still exist, and Drop has exclusive access.
        unsafe { sys::th_client_destroy(self.raw()) }
    }
}
