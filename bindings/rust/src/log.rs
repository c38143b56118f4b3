//! The library's log: to a Rust handler instead of stderr, at a level set at
//! run time (`th_set_log_handler`, `th_set_log_level`).

use std::ffi::{c_void, CStr};
use std::os::raw::c_char;
use std::sync::Mutex;

use crate::error::{check, Result};
use crate::sys;

/// How much the library says: lines above the level in force are not logged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    Error,
    /// The default, or `$TENSORHUB_LOG_LEVEL`'s (error, warn, info, debug).
    Warn,
    Info,
    Debug,
}

impl LogLevel {
    fn code(self) -> sys::th_log_level {
        match self {
            LogLevel::Error => sys::TH_LOG_ERROR,
            LogLevel::Warn => sys::TH_LOG_WARN,
            LogLevel::Info => sys::TH_LOG_INFO,
            LogLevel::Debug => sys::TH_LOG_DEBUG,
        }
    }

    fn from_code(code: sys::th_log_level) -> LogLevel {
        match code {
            sys::TH_LOG_ERROR => LogLevel::Error,
            sys::TH_LOG_WARN => LogLevel::Warn,
            sys::TH_LOG_INFO => LogLevel::Info,
            _ => LogLevel::Debug,
        }
    }
}

type Handler = Box<dyn Fn(LogLevel, &str) + Send + Sync + 'static>;

// The handler the library holds a pointer to; replaced under the lock, and
// dropped only once the library no longer calls it.
static INSTALLED: Mutex<Option<Box<Handler>>> = Mutex::new(None);

unsafe extern "C" fn trampoline(level: sys::th_log_level, message: *const c_char, user_data: *mut c_void) {
    if message.is_null() || user_data.is_null() {
        return;
    }
    // SAFETY: user_data is the Box<Handler> in INSTALLED, which outlives every
    // call the library makes with it (th_set_log_handler waits for them).
    let handler = unsafe { &*(user_data as *const Handler) };
    let text = unsafe { CStr::from_ptr(message) }.to_string_lossy();
    // A panic must not unwind into C: the line is dropped instead.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(LogLevel::from_code(level), &text)));
}

/// Sends every log line of this process's tensorhub clients and servers to
/// `handler(level, message)` instead of stderr, UCX's warnings and errors
/// included (at [`LogLevel::Info`], as "ucx: ..."). It runs on library
/// threads, possibly several at once, and must not call into tensorhub; a
/// panic in it drops the line. Returns once no call to the previous handler
/// is running.
pub fn set_log_handler(handler: impl Fn(LogLevel, &str) + Send + Sync + 'static) {
    let boxed: Box<Handler> = Box::new(Box::new(handler));
    let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    let user_data = &*boxed as *const Handler as *mut c_void;
    unsafe { sys::th_set_log_handler(Some(trampoline), user_data) };
    *installed = Some(boxed); // the previous one is no longer called: dropped here
}

/// Sends log lines to stderr again.
pub fn reset_log_handler() {
    let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    unsafe { sys::th_set_log_handler(None, std::ptr::null_mut()) };
    *installed = None;
}

/// Lines above `level` are not logged from now on.
pub fn set_log_level(level: LogLevel) -> Result<()> {
    check(unsafe { sys::th_set_log_level(level.code()) })
}

/// The level in force.
pub fn log_level() -> LogLevel {
    LogLevel::from_code(unsafe { sys::th_get_log_level() })
}
