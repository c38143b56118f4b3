//! Fetching: pulling a shard (or parts of its tensors) from its holders.

use crate::cancel::Cancel;
use crate::client::Client;
use crate::error::{check, Result};
use crate::ffi::{created, cstring, init_config, millis, version_arg, Hidden};
use crate::replica::Replica;
use crate::stats::{raw_stats, SyncStats};
use crate::sys;
use crate::tensor::{RawTensors, TensorMut};
use std::any::Any;
use std::cell::RefCell;
use std::ffi::{c_void, CString};
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::ptr;
use std::time::Duration;

/// What to fetch. `FetchRequest::new(model)` asks for the whole shard 0 of
/// the newest committed version under the client's default deadline.
#[derive(Clone, Default)]
pub struct FetchRequest<'s> {
    pub model: &'s str,
    /// `None`: the newest committed version.
    pub version: Option<u64>,
    pub shard: u32,
    /// Whole-fetch deadline; `None`: the client's control timeout x 6.
    pub timeout: Option<Duration>,
    /// Fetch only this tensor's bytes `offset..offset+length` into a single
    /// destination buffer (`length` 0: to the end). Cannot serve.
    pub tensor: Option<&'s str>,
    pub offset: u64,
    pub length: u64,
    /// Which chunks are checked against their publisher's checksums; a chunk
    /// that does not match is read again elsewhere. `None`: the library's
    /// default (`TH_DEFAULT_VERIFY`, a sample).
    pub verify: Option<Verify>,
    /// A token whose [`cancel`](Cancel::cancel), from any thread, ends the
    /// fetch with [`Status::Canceled`](crate::Status::Canceled).
    pub cancel: Option<&'s Cancel>,
    /// Called as `progress(bytes_done, bytes_total)` on the thread that
    /// fetches, between transfers, at most every `progress_interval`, and
    /// once more with `bytes_done == bytes_total` when every byte arrived
    /// (not when the fetch fails). `bytes_total` is what the fetch needs:
    /// the shard, the tensor range, or the ranges' bytes. The fetch (and the
    /// readers relaying from this one) waits for it: keep it quick. A panic in
    /// it stops the calls, cancels the fetch (as a [`Cancel`] would; `cancel`
    /// itself is left alone) and resumes in the caller once the fetch
    /// returned (a serving fetch's replica released first). `Sync` keeps a
    /// request shareable between threads; use atomics or a `Mutex` for its
    /// state (uncontended: only the fetching thread calls it).
    pub progress: Option<&'s (dyn Fn(u64, u64) + Sync)>,
    /// The least time between two `progress` calls (`Duration::ZERO`:
    /// whenever bytes may have arrived). `None`: the library's default
    /// (`TH_DEFAULT_PROGRESS_INTERVAL_MS`, 100 ms).
    pub progress_interval: Option<Duration>,
}

impl fmt::Debug for FetchRequest<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Destructured so that a new field cannot be left out unnoticed.
        let FetchRequest {
            model,
            version,
            shard,
            timeout,
            tensor,
            offset,
            length,
            verify,
            cancel,
            progress,
            progress_interval,
        } = self;
        f.debug_struct("FetchRequest")
            .field("model", model)
            .field("version", version)
            .field("shard", shard)
            .field("timeout", timeout)
            .field("tensor", tensor)
            .field("offset", offset)
            .field("length", length)
            .field("verify", verify)
            .field("cancel", cancel)
            .field("progress", &progress.map(|_| Hidden("<closure>")))
            .field("progress_interval", progress_interval)
            .finish()
    }
}

/// Which chunks a fetch checks against the checksums their publisher declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    Off,
    /// About one chunk in eight, drawn anew by every fetch.
    Sample,
    All,
}

impl Verify {
    fn raw(self) -> sys::th_verify {
        match self {
            Verify::Off => sys::TH_VERIFY_OFF,
            Verify::Sample => sys::TH_VERIFY_SAMPLE,
            Verify::All => sys::TH_VERIFY_ALL,
        }
    }
}

/// A request's progress closure as the C library calls it: through
/// [`progress_trampoline`], with a pointer to this as user_data. It lives on
/// the fetching thread's stack for the duration of the call.
struct ProgressHook<'a> {
    callback: Option<&'a (dyn Fn(u64, u64) + Sync)>,
    /// What the closure panicked with: it is not called again, and the panic
    /// resumes in the caller once the C call returned.
    panic: RefCell<Option<Box<dyn Any + Send>>>,
    /// With a closure, the fetch's token: a child of the request's, canceled
    /// when the closure panics.
    stop: Option<Cancel>,
}

impl<'a> ProgressHook<'a> {
    fn new(request: &FetchRequest<'a>) -> Result<Self> {
        let stop = match request.progress {
            Some(_) => Some(request.cancel.map_or_else(Cancel::new, Cancel::child)?),
            None => None,
        };
        Ok(ProgressHook { callback: request.progress, panic: RefCell::new(None), stop })
    }

    /// Hands `result` back, unless the closure panicked: then drops it (a
    /// serving fetch's replica is released while its buffers are still
    /// borrowed) and resumes that panic, with its payload, on this thread.
    fn finish<T>(self, result: T) -> T {
        if let Some(payload) = self.panic.into_inner() {
            drop(result);
            panic::resume_unwind(payload);
        }
        result
    }
}

/// `th_fetch_config.progress`. A panic must not unwind into C: it is kept for
/// [`ProgressHook::finish`], the fetch is canceled and the closure is not
/// called again.
unsafe extern "C" fn progress_trampoline(bytes_done: u64, bytes_total: u64, user_data: *mut c_void) {
    // SAFETY: user_data is the ProgressHook that raw_config installed; it
    // outlives the th_fetch call, during which alone the library calls this,
    // and only on the thread that made that call (so the RefCell is never
    // shared between threads).
    let hook = unsafe { &*(user_data as *const ProgressHook<'_>) };
    let Some(callback) = hook.callback else { return };
    if hook.panic.borrow().is_some() {
        return;
    }
    // AssertUnwindSafe: the panic resumes in the caller, which then sees the
    // closure's state as any panic would leave it.
    if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| callback(bytes_done, bytes_total))) {
        *hook.panic.borrow_mut() = Some(payload);
        if let Some(stop) = &hook.stop {
            stop.cancel();
        }
    }
}

/// The `th_fetch_config` of a request, and the strings it points into (keep
/// them alive while the config is used). Its progress fields point at `hook`,
/// which must stay where it is until the fetch returned.
fn raw_config(
    request: &FetchRequest<'_>,
    hook: &ProgressHook<'_>,
) -> Result<(sys::th_fetch_config, (CString, Option<CString>))> {
    let model = cstring("model", request.model)?;
    let tensor: Option<CString> = request.tensor.map(|t| cstring("tensor", t)).transpose()?;
    let mut raw = init_config(sys::th_fetch_config_init);
    raw.model = model.as_ptr();
    raw.version = version_arg(request.version);
    raw.shard = request.shard;
    // 0 asks for the default; an explicit deadline is at least 1 ms.
    raw.timeout_ms = request.timeout.map_or(0, |t| millis(t).max(1));
    raw.tensor = tensor.as_ref().map_or(ptr::null(), |t| t.as_ptr());
    if let Some(verify) = request.verify {
        raw.verify = verify.raw();
    }
    raw.cancel = hook.stop.as_ref().or(request.cancel).map_or(ptr::null_mut(), Cancel::raw);
    if hook.callback.is_some() {
        raw.progress = Some(progress_trampoline);
        raw.progress_user_data = hook as *const ProgressHook<'_> as *mut c_void;
    }
    if let Some(interval) = request.progress_interval {
        raw.progress_interval_ms = millis(interval);
    }
    Ok((raw, (model, tensor)))
}

impl<'s> FetchRequest<'s> {
    pub fn new(model: &'s str) -> Self {
        FetchRequest { model, ..FetchRequest::default() }
    }
}

impl Client {
    /// Fetches a whole shard into `dst` (the shard's tensors, in published
    /// order) and returns the version delivered. With `serve`, the buffers then
    /// serve that version to others through the returned replica, which keeps
    /// `dst` borrowed; read the data through [`Replica::data`] meanwhile.
    /// Without `serve`, match the result as `(version, _)`: a named
    /// `Option<Replica>`, even `None`, keeps `dst` borrowed until it drops.
    pub fn fetch<'a>(
        &'a self,
        model: &str,
        version: Option<u64>,
        shard: u32,
        dst: &'a mut [TensorMut<'_>],
        serve: bool,
    ) -> Result<(u64, Option<Replica<'a>>)> {
        self.fetch_with(&FetchRequest { version, shard, ..FetchRequest::new(model) }, dst, serve)
    }

    /// [`fetch`](Client::fetch) with a deadline or a single-tensor range.
    pub fn fetch_with<'a>(
        &'a self,
        request: &FetchRequest<'_>,
        dst: &'a mut [TensorMut<'_>],
        serve: bool,
    ) -> Result<(u64, Option<Replica<'a>>)> {
        self.fetch_with_stats(request, dst, serve).map(|(version, replica, _)| (version, replica))
    }

    /// [`fetch_with`](Client::fetch_with), also returning what the fetch did:
    /// bytes, time, GB/s, sources, re-plans.
    pub fn fetch_with_stats<'a>(
        &'a self,
        request: &FetchRequest<'_>,
        dst: &'a mut [TensorMut<'_>],
        serve: bool,
    ) -> Result<(u64, Option<Replica<'a>>, SyncStats)> {
        let hook = ProgressHook::new(request)?;
        let result = self.fetch_hooked(request, &hook, dst, serve);
        hook.finish(result)
    }

    fn fetch_hooked<'a>(
        &'a self,
        request: &FetchRequest<'_>,
        hook: &ProgressHook<'_>,
        dst: &'a mut [TensorMut<'_>],
        serve: bool,
    ) -> Result<(u64, Option<Replica<'a>>, SyncStats)> {
        let (mut raw, _strings) = raw_config(request, hook)?;
        raw.offset = request.offset;
        raw.length = request.length;
        let mut stats = raw_stats();
        raw.stats = &mut stats;

        let list = RawTensors::of_mut(dst)?;
        let mut version = 0;
        let mut out = ptr::null_mut();
        let out_replica = if serve { &mut out as *mut _ } else { ptr::null_mut() };
        // SAFETY: everything pointed to outlives the call; a serving replica
        // keeps `dst` borrowed for `'a`.
        check(unsafe { sys::th_fetch(self.raw(), &raw, list.as_ptr(), list.len(), &mut version, out_replica) })?;
        let stats = SyncStats::from(&stats);
        if !serve {
            return Ok((version, None, stats));
        }
        let handle = created(out, "th_fetch")?;
        // Downgrade to shared: from here on the served bytes may only be read.
        let dst: &'a [TensorMut<'_>] = dst;
        let data = dst.iter().map(|t| &*t.data).collect();
        Ok((version, Some(unsafe { Replica::from_raw(handle, data) }), stats))
    }
}

/// A strided part of one published tensor and the buffer it lands in
/// (`th_range`): `rows` runs of `row_bytes` bytes, run i read from byte
/// `offset + i * src_stride` of the tensor into byte `i * dst_stride` of `dst`
/// (`dst_stride` 0: packed). A contiguous byte range is one run.
#[derive(Debug)]
pub struct RangeMut<'a> {
    pub tensor: String,
    pub offset: u64,
    pub row_bytes: u64,
    pub rows: u64,
    pub src_stride: u64,
    pub dst_stride: u64,
    pub dst: &'a mut [u8],
}

impl<'a> RangeMut<'a> {
    /// Bytes `offset..offset + dst.len()` of `tensor`.
    pub fn bytes(tensor: impl Into<String>, offset: u64, dst: &'a mut [u8]) -> Self {
        let len = dst.len() as u64;
        RangeMut { tensor: tensor.into(), offset, row_bytes: len, rows: 1, src_stride: len, dst_stride: 0, dst }
    }

    /// `rows` runs of `row_bytes` every `src_stride` bytes from `offset`, packed
    /// into `dst`: e.g. a column block of a row-major matrix.
    pub fn rows(
        tensor: impl Into<String>,
        offset: u64,
        rows: u64,
        row_bytes: u64,
        src_stride: u64,
        dst: &'a mut [u8],
    ) -> Self {
        RangeMut { tensor: tensor.into(), offset, row_bytes, rows, src_stride, dst_stride: 0, dst }
    }
}

impl Client {
    /// Fetches only `ranges` of one shard (`request.tensor` must be `None`)
    /// in one fetch: one plan, then reads of just those bytes, each landing in
    /// its range's buffer. Returns the version delivered and the fetch's
    /// summary (`bytes` counts the ranges' bytes). The buffers do not serve.
    pub fn fetch_ranges(&self, request: &FetchRequest<'_>, ranges: &mut [RangeMut<'_>]) -> Result<(u64, SyncStats)> {
        let hook = ProgressHook::new(request)?;
        let result = self.fetch_ranges_hooked(request, &hook, ranges);
        hook.finish(result)
    }

    fn fetch_ranges_hooked(
        &self,
        request: &FetchRequest<'_>,
        hook: &ProgressHook<'_>,
        ranges: &mut [RangeMut<'_>],
    ) -> Result<(u64, SyncStats)> {
        let (mut raw, _strings) = raw_config(request, hook)?;
        let mut stats = raw_stats();
        raw.stats = &mut stats;

        let names = ranges.iter().map(|r| cstring("tensor", &r.tensor)).collect::<Result<Vec<_>>>()?;
        let list: Vec<sys::th_range> = ranges
            .iter_mut()
            .zip(&names)
            .map(|(r, name)| sys::th_range {
                tensor: name.as_ptr(),
                offset: r.offset,
                row_bytes: r.row_bytes,
                rows: r.rows,
                src_stride: r.src_stride,
                dst: r.dst.as_mut_ptr().cast::<c_void>(),
                dst_stride: r.dst_stride,
                dst_bytes: r.dst.len() as u64,
                mem_kind: sys::TH_MEM_HOST,
                device: 0,
            })
            .collect();
        let mut version = 0;
        // SAFETY: the names and the buffers `ranges` borrows mutably outlive the call.
        check(unsafe { sys::th_fetch_ranges(self.raw(), &raw, list.as_ptr(), list.len(), &mut version) })?;
        Ok((version, SyncStats::from(&stats)))
    }
}
