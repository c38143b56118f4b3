//! `Error`, `Status` and the single place that turns a C status into a `Result`.

use crate::sys;
use std::ffi::CStr;
use std::fmt;

/// Why a call failed: the C library's `TH_ERR_*` codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Status {
    InvalidArg,
    NotFound,
    NotCommitted,
    LayoutMismatch,
    Conflict,
    Timeout,
    Unavailable,
    Transport,
    Protocol,
    NoMemory,
    Closed,
    Unsupported,
    Internal,
    Retained,
    Auth,
    /// The caller canceled it ([`Cancel`](crate::Cancel)).
    Canceled,
    /// A code newer than these bindings (codes are only ever appended).
    Unknown(i32),
}

impl Status {
    /// Maps a non-zero C status code.
    pub fn from_code(code: i32) -> Status {
        match code {
            sys::TH_ERR_INVALID_ARG => Status::InvalidArg,
            sys::TH_ERR_NOT_FOUND => Status::NotFound,
            sys::TH_ERR_NOT_COMMITTED => Status::NotCommitted,
            sys::TH_ERR_LAYOUT_MISMATCH => Status::LayoutMismatch,
            sys::TH_ERR_CONFLICT => Status::Conflict,
            sys::TH_ERR_TIMEOUT => Status::Timeout,
            sys::TH_ERR_UNAVAILABLE => Status::Unavailable,
            sys::TH_ERR_TRANSPORT => Status::Transport,
            sys::TH_ERR_PROTOCOL => Status::Protocol,
            sys::TH_ERR_NO_MEMORY => Status::NoMemory,
            sys::TH_ERR_CLOSED => Status::Closed,
            sys::TH_ERR_UNSUPPORTED => Status::Unsupported,
            sys::TH_ERR_INTERNAL => Status::Internal,
            sys::TH_ERR_RETAINED => Status::Retained,
            sys::TH_ERR_AUTH => Status::Auth,
            sys::TH_ERR_CANCELED => Status::Canceled,
            other => Status::Unknown(other),
        }
    }

    /// The C code (`TH_ERR_*`).
    pub fn code(self) -> i32 {
        match self {
            Status::InvalidArg => sys::TH_ERR_INVALID_ARG,
            Status::NotFound => sys::TH_ERR_NOT_FOUND,
            Status::NotCommitted => sys::TH_ERR_NOT_COMMITTED,
            Status::LayoutMismatch => sys::TH_ERR_LAYOUT_MISMATCH,
            Status::Conflict => sys::TH_ERR_CONFLICT,
            Status::Timeout => sys::TH_ERR_TIMEOUT,
            Status::Unavailable => sys::TH_ERR_UNAVAILABLE,
            Status::Transport => sys::TH_ERR_TRANSPORT,
            Status::Protocol => sys::TH_ERR_PROTOCOL,
            Status::NoMemory => sys::TH_ERR_NO_MEMORY,
            Status::Closed => sys::TH_ERR_CLOSED,
            Status::Unsupported => sys::TH_ERR_UNSUPPORTED,
            Status::Internal => sys::TH_ERR_INTERNAL,
            Status::Retained => sys::TH_ERR_RETAINED,
            Status::Auth => sys::TH_ERR_AUTH,
            Status::Canceled => sys::TH_ERR_CANCELED,
            Status::Unknown(code) => code,
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // SAFETY: th_status_str accepts any value and returns a static string.
        let name = unsafe { CStr::from_ptr(sys::th_status_str(self.code())) };
        f.write_str(&name.to_string_lossy())
    }
}

/// A failed tensorhub call: the status and the library's message for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub code: Status,
    pub message: String,
}

impl Error {
    pub(crate) fn new(code: Status, message: impl Into<String>) -> Error {
        Error { code, message: message.into() }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "tensorhub: {}", self.code)
        } else {
            write!(f, "tensorhub: {}: {}", self.code, self.message)
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// Turns a C status into a `Result`. Must be called directly on the value the
/// C function returned, with no other tensorhub call in between: the message
/// lives in a thread-local slot that the next call on this thread overwrites.
/// (Rust code here never migrates threads between two statements, so being in
/// the same expression is enough.)
pub(crate) fn check(status: sys::th_status) -> Result<()> {
    if status == sys::TH_OK {
        return Ok(());
    }
    // SAFETY: never NULL, valid until the next tensorhub call on this thread;
    // copied before returning.
    let message = unsafe { CStr::from_ptr(sys::th_last_error()) }.to_string_lossy().into_owned();
    Err(Error::new(Status::from_code(status), message))
}
