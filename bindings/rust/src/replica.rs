//! Replicas: versions held in this process's memory and served to others.

use crate::client::Client;
use crate::error::{check, Result};
use crate::sys;
use std::marker::PhantomData;
use std::ptr::NonNull;

/// A version this process serves from its own buffers, until dropped or
/// [`release`](Replica::release)d.
///
/// `'a` covers both the buffers and the [`Client`]: while the replica lives the
/// buffers stay borrowed (readers may be copying out of them at any moment, so
/// nothing may write or free them) and the client cannot be dropped (its
/// handle must outlive the replica's for anything but release).
///
/// ```compile_fail,E0502
/// # fn f(client: &tensorhub::Client) -> tensorhub::Result<()> {
/// use tensorhub::{PublishConfig, Tensor};
/// let mut weights = vec![0u8; 64];
/// let replica = client.publish(&PublishConfig::new("m", 1), &[Tensor::bytes("w", &weights)])?;
/// weights[0] = 1; // rejected: readers may be copying `weights` right now
/// drop(replica);
/// # Ok(()) }
/// ```
///
/// ```compile_fail,E0505
/// # fn f(client: tensorhub::Client, weights: &[u8]) -> tensorhub::Result<()> {
/// let replica = client.publish(&tensorhub::PublishConfig::new("m", 1), &[tensorhub::Tensor::bytes("w", weights)])?;
/// drop(client); // rejected: the replica still needs its client
/// drop(replica);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Replica<'a> {
    raw: NonNull<sys::th_replica>,
    data: Vec<&'a [u8]>,
    _client: PhantomData<&'a Client>,
}

// SAFETY: a th_replica may be used from any thread, one call at a time;
// `&mut self` on the mutating calls and Drop enforce "one at a time".
unsafe impl Send for Replica<'_> {}

impl<'a> Replica<'a> {
    /// # Safety
    /// `raw` must be a live replica of a client borrowed for `'a`, serving the
    /// memory behind `data`.
    pub(crate) unsafe fn from_raw(raw: NonNull<sys::th_replica>, data: Vec<&'a [u8]>) -> Self {
        Replica { raw, data, _client: PhantomData }
    }

    /// The version this replica holds.
    pub fn version(&self) -> u64 {
        unsafe { sys::th_replica_version(self.raw.as_ptr()) }
    }

    /// Whether the client withdrew this replica because its bytes no longer
    /// match its version's checksums (a reader reported chunks of it and the
    /// client, checking its own copy, found them changed): nobody reads from
    /// it any more, and its buffers do not hold that version.
    pub fn withdrawn(&self) -> bool {
        unsafe { sys::th_replica_withdrawn(self.raw.as_ptr()) != 0 }
    }

    /// Read access to the served buffers, in tensor order. For a replica made
    /// by a serving fetch this is the way to read what was fetched: the
    /// destination stays mutably borrowed while it is served.
    pub fn data(&self) -> &[&'a [u8]] {
        &self.data
    }

    /// Stops new reads from being routed here, applies the client's retention
    /// policy if this is the last copy of a required version, and waits for
    /// reads in flight to drain. The buffers stay borrowed until the replica is
    /// released, so safe Rust writes them only after that; call this first when
    /// the policy's outcome (spill, wait, or
    /// [`Status::Retained`](crate::Status::Retained)) must be known before the
    /// replica is given up.
    pub fn begin_mutation(&mut self) -> Result<()> {
        check(unsafe { sys::th_replica_begin_mutation(self.raw.as_ptr()) })
    }

    /// Withdraws the replica and reports whether the server was told; `Drop`
    /// does the same but has to ignore that status.
    pub fn release(self) -> Result<()> {
        let mut this = std::mem::ManuallyDrop::new(self);
        drop(std::mem::take(&mut this.data));
        // SAFETY: Drop will not run for `this`, so this is the only release.
        check(unsafe { sys::th_replica_release(this.raw.as_ptr()) })
    }
}

impl Drop for Replica<'_> {
    fn drop(&mut self) {
        // SAFETY: released exactly once; the handle is freed either way.
        unsafe { sys::th_replica_release(self.raw.as_ptr()) };
    }
}
