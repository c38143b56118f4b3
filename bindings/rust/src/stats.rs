//! What one fetch or publish did (`th_sync_stats`).

use crate::sys;

/// The summary of one fetch or publish, for logs and experiment trackers.
/// For a publish, `bytes` and `chunks` are what was declared and `gbps` and
/// `sources` are 0 (nothing moved).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SyncStats {
    pub version: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub gbps: f64,
    /// Distinct holders bytes came from.
    pub sources: u32,
    /// Plans asked for after the first one.
    pub replans: u32,
    pub failed_sources: u32,
    pub chunks: u32,
    pub bytes_from_publisher: u64,
    pub bytes_from_replicas: u64,
    /// Chunks that did not match their publisher's checksum and were read
    /// again from another holder.
    pub checksum_mismatches: u32,
    /// Of `bytes`, how many were read with one-sided GETs (RDMA, shared
    /// memory, cuda_ipc): no CPU of the holder touched them. 0 for a publish.
    pub bytes_one_sided: u64,
    /// Of `bytes`, how many were asked for from a reader still receiving
    /// them and sent by it the moment it had them (waiting reads: a chain of
    /// readers over tcp). 0 for a publish.
    pub bytes_waited: u64,
    /// Of `bytes`, how many came from a source whose replica then changed (a
    /// mutation or release) and were kept: its holder let them finish before
    /// the change (the active-message path). 0 for a publish.
    pub bytes_kept: u64,
    /// Of `seconds`, how long the call waited for the metadata server's
    /// replies: a fetch's plan and end report, a publish's declaration (a
    /// fixed cost per call, whatever its size).
    pub server_seconds: f64,
}

/// A `th_sync_stats` ready to be filled by the library.
pub(crate) fn raw_stats() -> sys::th_sync_stats {
    let mut raw = std::mem::MaybeUninit::<sys::th_sync_stats>::zeroed();
    // SAFETY: th_sync_stats_init writes at most size_of::<th_sync_stats>() bytes.
    unsafe {
        sys::th_sync_stats_init(raw.as_mut_ptr(), std::mem::size_of::<sys::th_sync_stats>());
        raw.assume_init()
    }
}

impl From<&sys::th_sync_stats> for SyncStats {
    fn from(s: &sys::th_sync_stats) -> SyncStats {
        SyncStats {
            version: s.version,
            bytes: s.bytes,
            seconds: s.seconds,
            gbps: s.gbps,
            sources: s.sources,
            replans: s.replans,
            failed_sources: s.failed_sources,
            chunks: s.chunks,
            bytes_from_publisher: s.bytes_from_publisher,
            bytes_from_replicas: s.bytes_from_replicas,
            checksum_mismatches: s.checksum_mismatches,
            bytes_one_sided: s.bytes_one_sided,
            bytes_waited: s.bytes_waited,
            bytes_kept: s.bytes_kept,
            server_seconds: s.server_seconds,
        }
    }
}
