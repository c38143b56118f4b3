//! Cancel tokens (`th_cancel`): end fetches from another thread.

use crate::error::{check, Result};
use crate::ffi::created;
use crate::sys;
use std::fmt;
use std::ptr::{self, NonNull};

/// A token that ends the fetches it is given to ([`FetchRequest::cancel`](crate::FetchRequest::cancel))
/// with [`Status::Canceled`](crate::Status::Canceled) once [`cancel`](Cancel::cancel) is called, from
/// any thread: for a reader that shuts down, is preempted, or no longer wants the version it is
/// fetching. A fetch looks at it between transfers and returns once its reads in flight have
/// landed or been closed. A token stays canceled: make a new one for the next fetch.
///
/// [`child`](Cancel::child) makes a token that is canceled with this one, but not this one with
/// it: for one fetch among the several a shutdown token ends. Either may be dropped first.
pub struct Cancel {
    raw: NonNull<sys::th_cancel>,
}

// SAFETY: the C token is an atomic flag (and a shared link to its parent's,
// set once): signalled and read from any thread.
unsafe impl Send for Cancel {}
unsafe impl Sync for Cancel {}

impl Cancel {
    pub fn new() -> Result<Cancel> {
        Cancel::linked(ptr::null())
    }

    /// A token that is canceled when it or this one is; canceling it leaves
    /// this one alone.
    pub fn child(&self) -> Result<Cancel> {
        Cancel::linked(self.raw.as_ptr())
    }

    fn linked(parent: *const sys::th_cancel) -> Result<Cancel> {
        let mut out = ptr::null_mut();
        // SAFETY: `out` is a valid place for the new handle; `parent` is null
        // or a live token (the library shares what the link needs).
        check(unsafe { sys::th_cancel_create_linked(parent, &mut out) })?;
        Ok(Cancel { raw: created(out, "th_cancel_create_linked")? })
    }

    /// Cancels the fetches it was given to. Idempotent; never blocks.
    pub fn cancel(&self) {
        // SAFETY: a live token.
        unsafe { sys::th_cancel_signal(self.raw.as_ptr()) }
    }

    /// Whether [`cancel`](Cancel::cancel) was called, on it or on a token it
    /// is a [`child`](Cancel::child) of.
    pub fn is_canceled(&self) -> bool {
        // SAFETY: a live token.
        unsafe { sys::th_cancel_signalled(self.raw.as_ptr()) != 0 }
    }

    pub(crate) fn raw(&self) -> *mut sys::th_cancel {
        self.raw.as_ptr()
    }
}

impl fmt::Debug for Cancel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cancel").field("canceled", &self.is_canceled()).finish()
    }
}

impl Drop for Cancel {
    fn drop(&mut self) {
        // SAFETY: a fetch borrows the token through its FetchRequest, so none
        // that was given it is still running.
        unsafe { sys::th_cancel_destroy(self.raw.as_ptr()) }
    }
}
