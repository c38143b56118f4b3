//! Fetching: pulling a shard (or parts of its tensors) from its holders.

use crate::cancel::Cancel;
use crate::client::Client;
use crate::error::{check, Result};
use crate::ffi::{created, cstring, init_config, millis, version_arg};
use crate::replica::Replica;
use crate::stats::{raw_stats, SyncStats};
use crate::sys;
use crate::tensor::{RawTensors, TensorMut};
use std::ffi::{c_void, CString};
use std::ptr;
use std::time::Duration;

/// What to fetch. `FetchRequest::new(model)` asks for the whole shard 0 of
/// the newest committed version under the client's default deadline.
#[derive(Debug, Clone, Default)]
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

/// The `th_fetch_config` of a request, and the strings it points into (keep
/// them alive while the config is used).
fn raw_config(request: &FetchRequest<'_>) -> Result<(sys::th_fetch_config, (CString, Option<CString>))> {
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
    raw.cancel = request.cancel.map_or(ptr::null_mut(), Cancel::raw);
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
        let (mut raw, _strings) = raw_config(request)?;
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
        let (mut raw, _strings) = raw_config(request)?;
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
