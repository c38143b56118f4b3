//! Publish/fetch through an embedded server, two clients in one process.

mod common;

use common::{cluster, pattern};
use std::time::Duration;
use tensorhub::{Client, DType, FetchRequest, PublishConfig, RangeMut, Status, Tensor, TensorMut};

const BYTES: usize = 256 << 10;

fn publish_config(model: &str, version: u64) -> PublishConfig {
    // Small chunks so a fetch spans several of them.
    PublishConfig { chunk_bytes: 64 << 10, ..PublishConfig::new(model, version) }
}

fn shard<'a>(bufs: &'a [Vec<u8>]) -> Vec<Tensor<'a>> {
    bufs.iter()
        .enumerate()
        .map(|(i, b)| Tensor::new(format!("w{i}"), DType::BFloat16, &[(b.len() / 2) as i64], b))
        .collect()
}

fn dst<'a>(bufs: &'a mut [Vec<u8>]) -> Vec<TensorMut<'a>> {
    bufs.iter_mut()
        .enumerate()
        .map(|(i, b)| {
            let elems = (b.len() / 2) as i64;
            TensorMut::new(format!("w{i}"), DType::BFloat16, &[elems], b)
        })
        .collect()
}

#[test]
fn client_is_send_and_sync() {
    fn assert<T: Send + Sync>() {}
    assert::<Client>();
    assert::<tensorhub::Server>();
}

#[test]
fn whole_shard_round_trip_and_serving_fetch() {
    let c = cluster();
    let src: Vec<Vec<u8>> = (0..3).map(|i| pattern(i, BYTES)).collect();
    let published = c.publisher.publish(&publish_config("m", 1), &shard(&src)).unwrap();
    assert_eq!(published.version(), 1);
    assert_eq!(published.data().len(), 3);

    let mut bufs = vec![vec![0u8; BYTES]; 3];
    // `_`, not a named binding: a live Option<Replica> would keep `bufs` borrowed.
    let (v, _) = c.reader.fetch("m", None, 0, &mut dst(&mut bufs), false).unwrap();
    assert_eq!(v, 1);
    assert_eq!(bufs, src);

    // A serving fetch: the reader's buffers become a second source.
    let mut served = vec![vec![0u8; BYTES]; 3];
    let mut served_dst = dst(&mut served);
    let (v, replica) = c.reader.fetch("m", Some(1), 0, &mut served_dst, true).unwrap();
    let replica = replica.expect("serve = true returns a replica");
    assert_eq!((v, replica.version()), (1, 1));
    // Withdrawn only once its holder found its bytes changed: safe Rust
    // cannot change them behind the library's back (the Python and Go
    // bindings' tests do, and see it become true).
    assert!(!replica.withdrawn() && !published.withdrawn());
    assert!(replica.data().iter().zip(&src).all(|(got, want)| *got == want.as_slice()));

    // With the publisher gone, a third client is served by the reader alone.
    published.release().unwrap();
    let third = common::client(c.server.url(), "third");
    let mut again = vec![vec![0u8; BYTES]; 3];
    third.fetch("m", None, 0, &mut dst(&mut again), false).unwrap();
    assert_eq!(again, src);
    replica.release().unwrap();
}

#[test]
fn single_tensor_range_resolve_and_status() {
    let c = cluster();
    let src: Vec<Vec<u8>> = (0..2).map(|i| pattern(10 + i, BYTES)).collect();
    let _replica = c.publisher.publish(&publish_config("r", 4), &shard(&src)).unwrap();

    let mut part = vec![0u8; 5000];
    let request = FetchRequest {
        tensor: Some("w1"),
        offset: 100_001, // odd and across a chunk boundary
        length: 5000,
        timeout: Some(Duration::from_secs(10)),
        ..FetchRequest::new("r")
    };
    let (v, _) = c.reader.fetch_with(&request, &mut [TensorMut::bytes("slice", &mut part)], false).unwrap();
    assert_eq!(v, 4);
    assert_eq!(part, src[1][100_001..105_001]);

    assert_eq!(c.reader.resolve("r", None).unwrap(), 4);
    assert_eq!(c.reader.resolve("r", Some(4)).unwrap(), 4);
    let status = c.reader.status().unwrap();
    assert!(status.contains("\"r\""), "status JSON does not mention the model: {status}");
    let remote = tensorhub::server_status(c.server.url(), Duration::from_secs(5)).unwrap();
    assert!(remote.contains("\"r\""));
    assert_ne!(c.publisher.worker_id(), c.reader.worker_id());
}

#[test]
fn concurrent_fetches_share_one_client() {
    let c = cluster();
    let src = vec![pattern(7, BYTES)];
    let _replica = c.publisher.publish(&publish_config("c", 1), &shard(&src)).unwrap();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let mut bufs = vec![vec![0u8; BYTES]];
                c.reader.fetch("c", None, 0, &mut dst(&mut bufs), false).unwrap();
                assert_eq!(bufs, src);
            });
        }
    });
}

#[test]
fn describe_wait_for_version_and_pin() {
    let c = cluster();
    let src = vec![pattern(1, 4096), pattern(2, 8192)];
    let _v1 = c.publisher.publish(&publish_config("d", 1), &shard(&src)).unwrap();

    let json = c.reader.describe("d", None, 0).unwrap();
    for needle in ["\"model\"", "\"d\"", "\"w0\"", "\"w1\"", "bfloat16", "8192"] {
        assert!(json.contains(needle), "describe JSON lacks {needle}: {json}");
    }
    assert_eq!(c.reader.wait_for_version("d", 0, Duration::from_secs(5)).unwrap(), 1);
    let t0 = std::time::Instant::now();
    let err = c.reader.wait_for_version("d", 1, Duration::from_millis(300)).unwrap_err();
    assert_eq!(err.code, Status::Timeout, "{err}");
    assert!(t0.elapsed() < Duration::from_secs(5));
    c.reader.pin("d", 1).unwrap();
    c.reader.unpin("d", 1).unwrap();
}

#[test]
fn begin_mutation_keeps_the_last_copy_available() {
    let c = cluster();
    let src = vec![pattern(3, BYTES)];
    let mut replica = c.publisher.publish(&publish_config("mut", 1), &shard(&src)).unwrap();
    replica.begin_mutation().unwrap();
    replica.release().unwrap();
    // The default retention policy spills the last copy of the newest version.
    let mut bufs = vec![vec![0u8; BYTES]];
    c.reader.fetch("mut", Some(1), 0, &mut dst(&mut bufs), false).unwrap();
    assert_eq!(bufs, src);
}

#[test]
fn fetch_and_publish_report_what_they_did() {
    let c = cluster();
    let src: Vec<Vec<u8>> = (0..2).map(|i| pattern(i, BYTES)).collect();
    let (_published, p) = c.publisher.publish_with_stats(&publish_config("m", 5), &shard(&src)).unwrap();
    assert_eq!((p.version, p.bytes, p.chunks, p.sources, p.gbps), (5, 2 * BYTES as u64, 8, 0, 0.0));

    let mut bufs = vec![vec![0u8; BYTES]; 2];
    let (v, _, s) = c.reader.fetch_with_stats(&FetchRequest::new("m"), &mut dst(&mut bufs), false).unwrap();
    assert_eq!((v, s.version, s.bytes, s.sources, s.chunks), (5, 5, 2 * BYTES as u64, 1, 8));
    assert_eq!((s.bytes_from_publisher, s.bytes_from_replicas), (2 * BYTES as u64, 0));
    // One holder, one read path: all of it one-sided or none of it.
    assert!(s.bytes_one_sided == 0 || s.bytes_one_sided == s.bytes, "{s:?}");
    assert_eq!(p.bytes_one_sided, 0);
    assert_eq!((s.bytes_waited, p.bytes_waited), (0, 0), "read from a complete replica");
    assert_eq!((s.bytes_kept, p.bytes_kept), (0, 0), "nothing changed under the reader");
    assert!(s.seconds > 0.0 && s.gbps > 0.0);
    // The plan and the end report, the declaration: round trips to the server.
    assert!(s.server_seconds > 0.0 && s.server_seconds < s.seconds, "{s:?}");
    assert!(p.server_seconds > 0.0 && p.server_seconds <= p.seconds, "{p:?}");
    assert_eq!(bufs, src);
}

#[test]
fn column_block_and_byte_range_in_one_fetch() {
    // w0 as a row-major [64, 2048] byte matrix: columns 1024..1536 of every row
    // plus the last 100 bytes of w1, in one fetch that moves only those bytes.
    let c = cluster();
    let src: Vec<Vec<u8>> = (0..2).map(|i| pattern(20 + i, BYTES)).collect();
    let _replica = c.publisher.publish(&publish_config("cols", 1), &shard(&src)).unwrap();
    let (rows, cols) = (64usize, 2048usize);
    let mut block = vec![0u8; rows * 512];
    let mut tail = vec![0u8; 100];
    let mut ranges = [
        RangeMut::rows("w0", 1024, rows as u64, 512, cols as u64, &mut block),
        RangeMut::bytes("w1", (BYTES - 100) as u64, &mut tail),
    ];
    let (v, stats) = c.reader.fetch_ranges(&FetchRequest::new("cols"), &mut ranges).unwrap();
    assert_eq!((v, stats.bytes), (1, (rows * 512 + 100) as u64));
    for r in 0..rows {
        assert_eq!(block[r * 512..(r + 1) * 512], src[0][r * cols + 1024..r * cols + 1536], "row {r}");
    }
    assert_eq!(tail, src[1][BYTES - 100..]);

    let mut small = vec![0u8; 10];
    let err =
        c.reader.fetch_ranges(&FetchRequest::new("cols"), &mut [RangeMut::bytes("nope", 0, &mut small)]).unwrap_err();
    assert_eq!(err.code, Status::NotFound, "{err}");
    assert!(err.to_string().contains("'nope'"), "{err}");
    let err = c
        .reader
        .fetch_ranges(&FetchRequest::new("cols"), &mut [RangeMut::bytes("w1", BYTES as u64 - 5, &mut small)])
        .unwrap_err();
    assert_eq!(err.code, Status::InvalidArg, "{err}");
    assert!(err.to_string().contains("outside tensor 'w1'"), "{err}");
}
