//! The safe layer's defaults are the library's (read back from
//! th_*_config_init), and those are the header's TH_DEFAULT_* (layout.rs
//! checks sys.rs against the header).

use std::time::Duration;
use tensorhub::sys::*;
use tensorhub::{ClientConfig, PublishConfig, Retention, ServerConfig};

fn ms(v: u32) -> Duration {
    Duration::from_millis(v.into())
}

#[test]
fn configs_start_from_the_headers_defaults() {
    let server = ServerConfig::default();
    assert_eq!(server.listen_url, TH_DEFAULT_LISTEN_URL);
    assert_eq!(server.lease, ms(TH_DEFAULT_LEASE_MS));
    assert_eq!(server.max_readers_per_source, TH_DEFAULT_MAX_READERS_PER_SOURCE);
    assert_eq!(server.stripes, TH_DEFAULT_STRIPES);
    assert_eq!(server.etcd_prefix, TH_DEFAULT_ETCD_PREFIX);
    assert_eq!(server.etcd_lease, ms(TH_DEFAULT_ETCD_LEASE_MS));
    assert!(!server.standby);
    let unset = (&server.token, &server.metrics_url, &server.etcd_endpoints, &server.advertise_url);
    assert_eq!(unset, (&None, &None, &None, &None));

    let client = ClientConfig::new("tcp://127.0.0.1:1");
    assert_eq!(client.timeout, ms(TH_DEFAULT_TIMEOUT_MS));
    assert_eq!(client.heartbeat, ms(TH_DEFAULT_HEARTBEAT_MS));
    assert_eq!(client.chunk_timeout, ms(TH_DEFAULT_CHUNK_TIMEOUT_MS));
    assert_eq!(client.max_inflight, TH_DEFAULT_MAX_INFLIGHT);
    assert_eq!(client.retention, Retention::Spill);
    assert_eq!(TH_DEFAULT_RETENTION, TH_RETAIN_SPILL);
    assert_eq!(client.mutation_wait, ms(TH_DEFAULT_MUTATION_WAIT_MS));
    assert_eq!(client.spill_pool_bytes, TH_DEFAULT_SPILL_POOL_BYTES);
    assert_eq!(client.spill_ahead, TH_DEFAULT_SPILL_AHEAD != 0);
    assert_eq!(client.copy_threads, TH_DEFAULT_COPY_THREADS);
    assert_eq!(client.token, None);

    let publish = PublishConfig::new("m", 1);
    assert_eq!(publish.num_shards, TH_DEFAULT_NUM_SHARDS);
    assert_eq!(publish.chunk_bytes, TH_DEFAULT_CHUNK_BYTES);
    assert_eq!(publish.checksums, TH_DEFAULT_CHECKSUMS != 0);
}
