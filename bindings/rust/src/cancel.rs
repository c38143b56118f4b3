//! Cancel tokens (`th_cancel`): end fetches from another thread.

use crate::error::{check, Result};
use crate::ffi::created;
use crate::sys;
use std::fmt;
use std::ptr::{self, NonNull};
use std::sync::Arc;

/// A token that ends the fetches it is given to ([`FetchRequest::cancel`](crate::FetchRequest::cancel))
/// with [`Status::Canceled`](crate::Status::Canceled) once [`cancel`](Cancel::cancel) is called, from
/// any thread: for a reader that shuts down, is preempted, or no longer wants the version it is
/// fetching. A fetch looks at it between transfers and returns once its reads in flight have
/// landed or been closed. A token stays canceled: make a new one for the next fetch.
///
/// [`child`](Cancel::child) makes a token that is canceled with this one, but not this one with
/// it: for one fetch among the several a shutdown token ends.
pub struct Cancel {
    token: Arc<Token>,
}

/// The C token, and the one it is linked to, which must outlive it.
struct Token {
    raw: NonNull<sys::th_cancel>,
    _parent: Option<Arc<Token>>,
}

// SAFETY: the C token is an atomic flag (and a pointer to its parent's, set
// once): signalled and read from any thread.
unsafe impl Send for Token {}
unsafe impl Sync for Token {}

impl Cancel {
    pub fn new() -> Result<Cancel> {
        Cancel::linked(None)
    }

    /// A token that is canceled when it or this one is; canceling it leaves
    /// this one alone. It keeps this one's C token alive.
    pub fn child(&self) -> Result<Cancel> {
        Cancel::linked(Some(&self.token))
    }

    fn linked(parent: Option<&Arc<Token>>) -> Result<Cancel> {
        let mut out = ptr::null_mut();
        let parent_raw = parent.map_or(ptr::null(), |p| p.raw.as_ptr() as *const sys::th_cancel);
        // SAFETY: `out` is a valid place for the new handle; the parent is a
        // live token, kept alive by the new one.
        check(unsafe { sys::th_cancel_create_linked(parent_raw, &mut out) })?;
        let raw = created(out, "th_cancel_create_linked")?;
        Ok(Cancel { token: Arc::new(Token { raw, _parent: parent.cloned() }) })
    }

    /// Cancels the fetches it was given to. Idempotent; never blocks.
    pub fn cancel(&self) {
        // SAFETY: a live token.
        unsafe { sys::th_cancel_signal(self.raw()) }
    }

    /// Whether [`cancel`](Cancel::cancel) was called, on it or on a token it
    /// is a [`child`](Cancel::child) of.
    pub fn is_canceled(&self) -> bool {
        // SAFETY: a live token.
        unsafe { sys::th_cancel_signalled(self.raw()) != 0 }
    }

    pub(crate) fn raw(&self) -> *mut sys::th_cancel {
        self.token.raw.as_ptr()
    }
}

impl fmt::Debug for Cancel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cancel").field("canceled", &self.is_canceled()).finish()
    }
}

impl Drop for Token {
    fn drop(&mut self) {
        // SAFETY: a fetch borrows its Cancel through its FetchRequest, so none
        // that was given it is still running; its children hold an Arc of
        // it, so none is left (the parent drops after this).
        unsafe { sys::th_cancel_destroy(self.raw.as_ptr()) }
    }
}
