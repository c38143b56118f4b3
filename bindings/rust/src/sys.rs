//! Raw declarations mirroring `include/tensorhub/tensorhub.h`, one to one.
//!
//! Hand-written (no bindgen); `tests/layout.rs` compiles a C probe against the
//! real header and fails if any size, offset or constant here drifts from it.
//! C enums are passed as `i32` so that an out-of-range value coming back from
//! the library can never be undefined behaviour in Rust.
#![allow(non_camel_case_types)]

use std::os::raw::{c_char, c_int};

pub type th_status = i32;
pub const TH_OK: th_status = 0;
pub const TH_ERR_INVALID_ARG: th_status = -1;
pub const TH_ERR_NOT_FOUND: th_status = -2;
pub const TH_ERR_NOT_COMMITTED: th_status = -3;
pub const TH_ERR_LAYOUT_MISMATCH: th_status = -4;
pub const TH_ERR_CONFLICT: th_status = -5;
pub const TH_ERR_TIMEOUT: th_status = -6;
pub const TH_ERR_UNAVAILABLE: th_status = -7;
pub const TH_ERR_TRANSPORT: th_status = -8;
pub const TH_ERR_PROTOCOL: th_status = -9;
pub const TH_ERR_NO_MEMORY: th_status = -10;
pub const TH_ERR_CLOSED: th_status = -11;
pub const TH_ERR_UNSUPPORTED: th_status = -12;
pub const TH_ERR_INTERNAL: th_status = -13;
pub const TH_ERR_RETAINED: th_status = -14;
pub const TH_ERR_AUTH: th_status = -15;
pub const TH_ERR_CANCELED: th_status = -16;

pub type th_dtype = i32;
pub const TH_DTYPE_UINT8: th_dtype = 0;
pub const TH_DTYPE_INT8: th_dtype = 1;
pub const TH_DTYPE_INT16: th_dtype = 2;
pub const TH_DTYPE_INT32: th_dtype = 3;
pub const TH_DTYPE_INT64: th_dtype = 4;
pub const TH_DTYPE_FLOAT16: th_dtype = 5;
pub const TH_DTYPE_BFLOAT16: th_dtype = 6;
pub const TH_DTYPE_FLOAT32: th_dtype = 7;
pub const TH_DTYPE_FLOAT64: th_dtype = 8;
pub const TH_DTYPE_BOOL: th_dtype = 9;
pub const TH_DTYPE_FLOAT8_E4M3: th_dtype = 10;
pub const TH_DTYPE_FLOAT8_E5M2: th_dtype = 11;
pub const TH_DTYPE_UINT16: th_dtype = 12;
pub const TH_DTYPE_UINT32: th_dtype = 13;
pub const TH_DTYPE_UINT64: th_dtype = 14;

pub type th_mem_kind = i32;
pub const TH_MEM_HOST: th_mem_kind = 0;
pub const TH_MEM_CUDA: th_mem_kind = 1;

pub type th_retention = i32;
pub const TH_RETAIN_SPILL: th_retention = 0;
pub const TH_RETAIN_WAIT: th_retention = 1;
pub const TH_RETAIN_FAIL: th_retention = 2;

pub type th_verify = i32;
pub const TH_VERIFY_OFF: th_verify = 0;
pub const TH_VERIFY_SAMPLE: th_verify = 1;
pub const TH_VERIFY_ALL: th_verify = 2;

pub const TH_VERSION_MAJOR: u32 = 0;
pub const TH_VERSION_MINOR: u32 = 1;
pub const TH_VERSION_PATCH: u32 = 0;
pub const TH_VERSION_NUMBER: u32 = TH_VERSION_MAJOR * 10000 + TH_VERSION_MINOR * 100 + TH_VERSION_PATCH;
pub const TH_MAX_DIMS: usize = 8;
pub const TH_LATEST: u64 = u64::MAX;

// What the *_config_init functions fill in (the safe layer reads them back
// from there rather than using these).
pub const TH_DEFAULT_LISTEN_URL: &str = "tcp://127.0.0.1:0";
pub const TH_DEFAULT_LEASE_MS: u32 = 10000;
pub const TH_DEFAULT_MAX_READERS_PER_SOURCE: u32 = 2;
pub const TH_DEFAULT_ETCD_PREFIX: &str = "/tensorhub";
pub const TH_DEFAULT_ETCD_LEASE_MS: u32 = 3000;
pub const TH_DEFAULT_STRIPES: u32 = 0;
pub const TH_DEFAULT_TIMEOUT_MS: u32 = 10000;
pub const TH_DEFAULT_HEARTBEAT_MS: u32 = 1000;
pub const TH_DEFAULT_CHUNK_TIMEOUT_MS: u32 = 5000;
pub const TH_DEFAULT_MAX_INFLIGHT: u32 = 8;
pub const TH_DEFAULT_RETENTION: th_retention = TH_RETAIN_SPILL;
pub const TH_DEFAULT_MUTATION_WAIT_MS: u32 = 5000;
pub const TH_DEFAULT_SPILL_POOL_BYTES: u64 = 0;
pub const TH_DEFAULT_SPILL_AHEAD: u32 = 0;
pub const TH_DEFAULT_COPY_THREADS: u32 = 2;
pub const TH_MAX_COPY_THREADS: u32 = 16;
pub const TH_DEFAULT_NUM_SHARDS: u32 = 1;
pub const TH_DEFAULT_CHUNK_BYTES: u64 = 4 << 20;
pub const TH_DEFAULT_CHECKSUMS: u32 = 1;
pub const TH_DEFAULT_PROGRESS_INTERVAL_MS: u32 = 100;
pub const TH_DEFAULT_VERIFY: th_verify = TH_VERIFY_SAMPLE;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct th_tensor {
    pub name: *const c_char,
    pub dtype: th_dtype,
    pub ndim: u32,
    pub shape: [i64; TH_MAX_DIMS],
    pub data: *mut std::ffi::c_void,
    pub nbytes: u64,
    pub mem_kind: th_mem_kind,
    pub device: i32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct th_server_config {
    pub struct_size: usize,
    pub listen_url: *const c_char,
    pub lease_ms: u32,
    pub max_readers_per_source: u32,
    pub token: *const c_char,
    pub metrics_url: *const c_char,
    pub standby: u32,
    pub etcd_endpoints: *const c_char,
    pub etcd_prefix: *const c_char,
    pub etcd_lease_ms: u32,
    pub advertise_url: *const c_char,
    pub stripes: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct th_client_config {
    pub struct_size: usize,
    pub server_url: *const c_char,
    pub worker_name: *const c_char,
    pub labels: *const c_char,
    pub timeout_ms: u32,
    pub heartbeat_ms: u32,
    pub chunk_timeout_ms: u32,
    pub max_inflight: u32,
    pub retention: th_retention,
    pub mutation_wait_ms: u32,
    pub token: *const c_char,
    pub spill_pool_bytes: u64,
    pub spill_ahead: u32,
    pub copy_threads: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct th_publish_config {
    pub struct_size: usize,
    pub model: *const c_char,
    pub version: u64,
    pub shard: u32,
    pub num_shards: u32,
    pub chunk_bytes: u64,
    pub stats: *mut th_sync_stats,
    pub checksums: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct th_sync_stats {
    pub struct_size: usize,
    pub version: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub gbps: f64,
    pub sources: u32,
    pub replans: u32,
    pub failed_sources: u32,
    pub chunks: u32,
    pub bytes_from_publisher: u64,
    pub bytes_from_replicas: u64,
    pub checksum_mismatches: u32,
    pub bytes_one_sided: u64,
    pub bytes_waited: u64,
    pub bytes_kept: u64,
    pub server_seconds: f64,
}

/// th_fetch_config.progress: called with (bytes_done, bytes_total, user_data).
pub type th_progress_fn =
    Option<unsafe extern "C" fn(bytes_done: u64, bytes_total: u64, user_data: *mut std::ffi::c_void)>;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct th_fetch_config {
    pub struct_size: usize,
    pub model: *const c_char,
    pub version: u64,
    pub shard: u32,
    pub timeout_ms: u32,
    pub tensor: *const c_char,
    pub offset: u64,
    pub length: u64,
    pub stats: *mut th_sync_stats,
    pub progress: th_progress_fn,
    pub progress_user_data: *mut std::ffi::c_void,
    pub progress_interval_ms: u32,
    pub verify: th_verify,
    pub cancel: *mut th_cancel,
}

/// A strided part of a published tensor and where it lands (frozen layout).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct th_range {
    pub tensor: *const c_char,
    pub offset: u64,
    pub row_bytes: u64,
    pub rows: u64,
    pub src_stride: u64,
    pub dst: *mut std::ffi::c_void,
    pub dst_stride: u64,
    pub dst_bytes: u64,
    pub mem_kind: th_mem_kind,
    pub device: i32,
}

/// Opaque handles: only ever used behind pointers.
#[repr(C)]
pub struct th_server {
    _private: [u8; 0],
}
#[repr(C)]
pub struct th_client {
    _private: [u8; 0],
}
#[repr(C)]
pub struct th_replica {
    _private: [u8; 0],
}
pub type th_log_level = i32;
pub const TH_LOG_ERROR: th_log_level = 0;
pub const TH_LOG_WARN: th_log_level = 1;
pub const TH_LOG_INFO: th_log_level = 2;
pub const TH_LOG_DEBUG: th_log_level = 3;

/// th_log_fn: called with (level, message, user_data) on whichever library thread logs.
pub type th_log_fn =
    Option<unsafe extern "C" fn(level: th_log_level, message: *const c_char, user_data: *mut std::ffi::c_void)>;

#[repr(C)]
pub struct th_cancel {
    _private: [u8; 0],
}

// The library catches every C++ exception at its boundary (src/api), so plain
// "C" (not "C-unwind") is correct: nothing unwinds through these calls.
extern "C" {
    pub fn th_status_str(status: th_status) -> *const c_char;
    pub fn th_last_error() -> *const c_char;
    pub fn th_free(ptr: *mut std::ffi::c_void);
    pub fn th_version() -> *const c_char;
    pub fn th_version_number() -> u32;
    pub fn th_set_log_handler(handler: th_log_fn, user_data: *mut std::ffi::c_void);
    pub fn th_set_log_level(level: th_log_level) -> th_status;
    pub fn th_get_log_level() -> th_log_level;
    pub fn th_dtype_size(dtype: th_dtype) -> usize;

    pub fn th_server_config_init(cfg: *mut th_server_config, size: usize);
    pub fn th_server_create(out: *mut *mut th_server, cfg: *const th_server_config) -> th_status;
    pub fn th_server_url(server: *const th_server) -> *const c_char;
    pub fn th_server_metrics_url(server: *const th_server) -> *const c_char;
    pub fn th_server_destroy(server: *mut th_server);

    pub fn th_client_config_init(cfg: *mut th_client_config, size: usize);
    pub fn th_client_create(out: *mut *mut th_client, cfg: *const th_client_config) -> th_status;
    pub fn th_client_destroy(client: *mut th_client);
    pub fn th_client_worker_id(client: *const th_client) -> u64;

    pub fn th_sync_stats_init(stats: *mut th_sync_stats, size: usize);
    pub fn th_publish_config_init(cfg: *mut th_publish_config, size: usize);
    pub fn th_publish(
        client: *mut th_client,
        cfg: *const th_publish_config,
        tensors: *const th_tensor,
        n: usize,
        out: *mut *mut th_replica,
    ) -> th_status;
    pub fn th_replica_version(replica: *const th_replica) -> u64;
    pub fn th_replica_withdrawn(replica: *const th_replica) -> c_int;
    pub fn th_replica_release(replica: *mut th_replica) -> th_status;
    pub fn th_replica_begin_mutation(replica: *mut th_replica) -> th_status;
    pub fn th_pin(client: *mut th_client, model: *const c_char, version: u64) -> th_status;
    pub fn th_unpin(client: *mut th_client, model: *const c_char, version: u64) -> th_status;

    pub fn th_cancel_create(out: *mut *mut th_cancel) -> th_status;
    pub fn th_cancel_create_linked(parent: *const th_cancel, out: *mut *mut th_cancel) -> th_status;
    pub fn th_cancel_signal(cancel: *mut th_cancel);
    pub fn th_cancel_signalled(cancel: *const th_cancel) -> c_int;
    pub fn th_cancel_destroy(cancel: *mut th_cancel);

    pub fn th_fetch_config_init(cfg: *mut th_fetch_config, size: usize);
    pub fn th_fetch(
        client: *mut th_client,
        cfg: *const th_fetch_config,
        dst: *const th_tensor,
        n: usize,
        out_version: *mut u64,
        out_replica: *mut *mut th_replica,
    ) -> th_status;
    pub fn th_fetch_ranges(
        client: *mut th_client,
        cfg: *const th_fetch_config,
        ranges: *const th_range,
        n: usize,
        out_version: *mut u64,
    ) -> th_status;
    pub fn th_resolve(client: *mut th_client, model: *const c_char, version: u64, out_version: *mut u64) -> th_status;
    pub fn th_wait_for_version(
        client: *mut th_client,
        model: *const c_char,
        newer_than: u64,
        timeout_ms: u32,
        out_version: *mut u64,
    ) -> th_status;
    pub fn th_wait_for_version_cancelable(
        client: *mut th_client,
        model: *const c_char,
        newer_than: u64,
        timeout_ms: u32,
        cancel: *mut th_cancel,
        out_version: *mut u64,
    ) -> th_status;
    pub fn th_describe_json(
        client: *mut th_client,
        model: *const c_char,
        version: u64,
        shard: u32,
        out_json: *mut *mut c_char,
    ) -> th_status;

    pub fn th_status_json(client: *mut th_client, out_json: *mut *mut c_char) -> th_status;
    pub fn th_server_status_json(server_url: *const c_char, timeout_ms: u32, out_json: *mut *mut c_char) -> th_status;
}
