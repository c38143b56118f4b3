//! Conversions at the C boundary shared by the safe wrappers.

use crate::error::{Error, Result, Status};
use crate::sys;
use std::ffi::{CStr, CString};
use std::fmt;
use std::os::raw::c_char;
use std::time::Duration;

/// A C string for an argument. Interior NULs would silently truncate the value
/// on the C side, so they are rejected here instead.
pub(crate) fn cstring(what: &str, value: &str) -> Result<CString> {
    CString::new(value).map_err(|_| Error::new(Status::InvalidArg, format!("{what} contains a NUL byte: {value:?}")))
}

/// [`cstring`] for an optional argument; `None` leaves the field as
/// `*_config_init` set it (see [`ptr_or`]).
pub(crate) fn opt_cstring(what: &str, value: &Option<String>) -> Result<Option<CString>> {
    value.as_deref().map(|v| cstring(what, v)).transpose()
}

/// The pointer to pass for an optional C string: `None` keeps `default`, the
/// value `*_config_init` put in the field (the library's default).
pub(crate) fn ptr_or(value: &Option<CString>, default: *const c_char) -> *const c_char {
    value.as_ref().map_or(default, |v| v.as_ptr())
}

/// A copy of a string the library owns (a default from `*_config_init`, a
/// URL of a live handle); NULL reads as "".
///
/// # Safety
/// `ptr` must be NULL or a NUL-terminated string valid during the call.
pub(crate) unsafe fn copy_string(ptr: *const c_char) -> String {
    if ptr.is_null() {
        return String::new();
    }
    CStr::from_ptr(ptr).to_string_lossy().into_owned()
}

/// What `Debug` prints instead of a value it must not or cannot show: a
/// cluster token (the header promises it is never logged, and `{:?}` output
/// ends up in logs) or a closure (which has no `Debug`).
pub(crate) struct Hidden(pub(crate) &'static str);

impl fmt::Debug for Hidden {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// A token field as `Debug` shows it: whether one is set, never its value.
pub(crate) fn redacted(token: &Option<String>) -> Option<Hidden> {
    token.as_ref().map(|_| Hidden("<redacted>"))
}

/// Milliseconds for a C `uint32_t` deadline. Rounds up, because 0 often means
/// "the default" in the C API and a 100 µs deadline must not become that;
/// saturates instead of wrapping.
pub(crate) fn millis(d: Duration) -> u32 {
    let ms = d.as_nanos().div_ceil(1_000_000);
    u32::try_from(ms).unwrap_or(u32::MAX)
}

/// Copies a library-allocated string and frees the original.
///
/// # Safety
/// `ptr` must be NULL or a NUL-terminated string allocated by the library.
pub(crate) unsafe fn take_string(ptr: *mut c_char) -> String {
    if ptr.is_null() {
        return String::new();
    }
    let s = CStr::from_ptr(ptr).to_string_lossy().into_owned();
    sys::th_free(ptr.cast());
    s
}

/// Turns the TH_LATEST convention into an `Option`.
pub(crate) fn version_arg(version: Option<u64>) -> u64 {
    version.unwrap_or(sys::TH_LATEST)
}

/// A handle the library reported as created. NULL with TH_OK would be a
/// library bug; reporting it beats panicking.
pub(crate) fn created<T>(ptr: *mut T, what: &str) -> Result<std::ptr::NonNull<T>> {
    std::ptr::NonNull::new(ptr)
        .ok_or_else(|| Error::new(Status::Internal, format!("{what} returned TH_OK but no handle")))
}

/// A config struct filled by its `*_config_init` (which sets `struct_size`).
/// The size passed is this crate's: the library writes nothing past it.
pub(crate) fn init_config<T>(init: unsafe extern "C" fn(*mut T, usize)) -> T {
    let mut cfg = std::mem::MaybeUninit::<T>::zeroed();
    // SAFETY: *_config_init writes at most size_of::<T>() bytes of the struct
    // it is given, and all-zero bytes are valid for these plain C structs.
    unsafe {
        init(cfg.as_mut_ptr(), std::mem::size_of::<T>());
        cfg.assume_init()
    }
}
