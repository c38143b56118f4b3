//! Publishing: declaring that this process holds a shard of a version.

use crate::client::Client;
use crate::error::{check, Result};
use crate::ffi::{created, cstring, init_config};
use crate::replica::Replica;
use crate::stats::{raw_stats, SyncStats};
use crate::sys;
use crate::tensor::{RawTensors, Tensor};
use std::ptr;

/// What is published: model, version and shard. [`PublishConfig::new`] fills
/// in the library's defaults (one shard, its default chunk size).
#[derive(Debug, Clone)]
pub struct PublishConfig {
    pub model: String,
    /// Chosen by the publisher; strictly increasing per model.
    pub version: u64,
    pub shard: u32,
    pub num_shards: u32,
    /// Unit of progress, checksums and reads; must agree across the shards
    /// of a version.
    pub chunk_bytes: u64,
    /// Compute a checksum of every chunk for readers to check.
    pub checksums: bool,
}

impl PublishConfig {
    pub fn new(model: impl Into<String>, version: u64) -> PublishConfig {
        let raw = init_config(sys::th_publish_config_init);
        PublishConfig {
            model: model.into(),
            version,
            shard: raw.shard,
            num_shards: raw.num_shards,
            chunk_bytes: raw.chunk_bytes,
            checksums: raw.checksums != 0,
        }
    }
}

impl Client {
    /// Serves `tensors` (nothing is copied) as `config`'s shard. The version
    /// becomes visible to readers once every shard is published. The buffers
    /// stay borrowed until the returned replica is dropped or released.
    pub fn publish<'a>(&'a self, config: &PublishConfig, tensors: &[Tensor<'a>]) -> Result<Replica<'a>> {
        self.publish_with_stats(config, tensors).map(|(replica, _)| replica)
    }

    /// [`publish`](Client::publish), also returning its summary (bytes and
    /// chunks declared, time taken).
    pub fn publish_with_stats<'a>(
        &'a self,
        config: &PublishConfig,
        tensors: &[Tensor<'a>],
    ) -> Result<(Replica<'a>, SyncStats)> {
        let model = cstring("model", &config.model)?;
        let mut raw = init_config(sys::th_publish_config_init);
        raw.model = model.as_ptr();
        raw.version = config.version;
        raw.shard = config.shard;
        raw.num_shards = config.num_shards;
        raw.chunk_bytes = config.chunk_bytes;
        raw.checksums = u32::from(config.checksums);
        let mut stats = raw_stats();
        raw.stats = &mut stats;
        let list = RawTensors::of(tensors)?;
        let mut out = ptr::null_mut();
        // SAFETY: config, names and tensor array outlive the call; the buffers
        // outlive the replica through `'a`.
        check(unsafe { sys::th_publish(self.raw(), &raw, list.as_ptr(), list.len(), &mut out) })?;
        let handle = created(out, "th_publish")?;
        let replica = unsafe { Replica::from_raw(handle, tensors.iter().map(|t| t.data).collect()) };
        Ok((replica, SyncStats::from(&stats)))
    }
}
