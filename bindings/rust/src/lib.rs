#![doc = include_str!("../README.md")]
//!
//! # Layout
//! [`sys`] holds the raw C declarations; everything else is the safe layer.
//! Errors carry the library's per-thread message, read right after the failing
//! call on the same thread.

pub mod sys;

mod cancel;
mod client;
mod error;
mod fetch;
mod ffi;
mod log;
mod publish;
mod replica;
mod server;
mod stats;
mod tensor;

pub use cancel::Cancel;
pub use client::{Client, ClientConfig, Retention};
pub use error::{Error, Result, Status};
pub use fetch::{FetchRequest, RangeMut, Verify};
pub use log::{log_level, reset_log_handler, set_log_handler, set_log_level, LogLevel};
pub use publish::PublishConfig;
pub use replica::Replica;
pub use server::{server_status, Server, ServerConfig};
pub use stats::SyncStats;
pub use tensor::{DType, Tensor, TensorMut};

/// The loaded library's version, "MAJOR.MINOR.PATCH".
pub fn version() -> &'static str {
    // SAFETY: a static NUL-terminated string.
    unsafe { std::ffi::CStr::from_ptr(sys::th_version()) }.to_str().unwrap_or("?")
}

/// `TH_VERSION_NUMBER` of the loaded library; compare with
/// [`sys::TH_VERSION_NUMBER`] (what these bindings were written against).
pub fn version_number() -> u32 {
    unsafe { sys::th_version_number() }
}
