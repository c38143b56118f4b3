//! A fetch's progress closure: called on the fetching thread with what has
//! arrived, last with everything; a panic in it ends the fetch and comes
//! back to the caller.

mod common;

use common::{cluster, pattern, Cluster};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread::{self, ThreadId};
use std::time::Duration;
use tensorhub::{Cancel, ClientConfig, FetchRequest, PublishConfig, RangeMut, Replica, Tensor, TensorMut};

const BYTES: usize = 4 << 20;

/// Publishes `src` as "m" v1 in 64 KiB chunks: a fetch of it spans 64.
fn publish<'a>(c: &'a Cluster, src: &'a [u8]) -> Replica<'a> {
    let config = PublishConfig { chunk_bytes: 64 << 10, ..PublishConfig::new("m", 1) };
    c.publisher.publish(&config, &[Tensor::bytes("w", src)]).unwrap()
}

/// Checks the calls a fetch of `total` bytes made: some, on `thread`, never
/// going back, each of `total`, the last with everything.
fn check_calls(calls: &[(u64, u64, ThreadId)], total: u64, thread: ThreadId) {
    assert!(!calls.is_empty(), "never called");
    for pair in calls.windows(2) {
        assert!(pair[0].0 <= pair[1].0, "bytes_done went back: {pair:?}");
    }
    assert!(calls.iter().all(|c| c.1 == total && c.0 <= total && c.2 == thread), "{calls:?}");
    assert_eq!(calls.last().map(|c| (c.0, c.1)), Some((total, total)), "{calls:?}");
}

#[test]
fn progress_reaches_the_total_on_the_fetching_thread() {
    let c = cluster();
    let src = pattern(1, BYTES);
    let _replica = publish(&c, &src);

    let calls = Mutex::new(Vec::new());
    let record = |done: u64, total: u64| calls.lock().unwrap().push((done, total, thread::current().id()));
    let request = FetchRequest {
        progress: Some(&record),
        progress_interval: Some(Duration::from_millis(1)),
        ..FetchRequest::new("m")
    };
    let mut dst = vec![0u8; BYTES];
    let (version, _) = c.reader.fetch_with(&request, &mut [TensorMut::bytes("w", &mut dst)], false).unwrap();
    assert_eq!(version, 1);
    assert!(dst == src, "the fetched bytes differ");
    check_calls(&calls.lock().unwrap(), BYTES as u64, thread::current().id());

    // fetch_ranges takes the same request: its total is the ranges' bytes.
    calls.lock().unwrap().clear();
    let (mut head, mut tail) = (vec![0u8; 100_000], vec![0u8; 1000]);
    let mut ranges = [RangeMut::bytes("w", 0, &mut head), RangeMut::bytes("w", (BYTES - 1000) as u64, &mut tail)];
    c.reader.fetch_ranges(&request, &mut ranges).unwrap();
    assert!(head == src[..100_000] && tail == src[BYTES - 1000..]);
    check_calls(&calls.lock().unwrap(), 101_000, thread::current().id());
}

/// How many times a fetch of "m" calls its progress closure at `interval`.
fn calls_at(c: &Cluster, interval: Duration) -> usize {
    let calls = AtomicUsize::new(0);
    let count = |_: u64, _: u64| {
        calls.fetch_add(1, Ordering::Relaxed);
    };
    let request = FetchRequest { progress: Some(&count), progress_interval: Some(interval), ..FetchRequest::new("m") };
    let mut dst = vec![0u8; BYTES];
    c.reader.fetch_with(&request, &mut [TensorMut::bytes("w", &mut dst)], false).unwrap();
    calls.into_inner()
}

#[test]
fn the_interval_sets_how_often_progress_is_called() {
    let c = cluster();
    let src = pattern(2, BYTES);
    let _replica = publish(&c, &src);
    // An hour: the first call between transfers (none was made an hour ago)
    // and the final one. Zero: whenever bytes may have arrived, which for 64
    // chunks read at most 8 at a time is several times.
    let hourly = calls_at(&c, Duration::from_secs(3600));
    assert!((1..=2).contains(&hourly), "{hourly} calls an hour apart");
    let eager = calls_at(&c, Duration::ZERO);
    assert!(eager >= 3, "{eager} calls at interval 0");
}

#[derive(Debug, PartialEq)]
struct Boom(u32);

#[test]
fn a_panic_in_progress_resumes_in_the_caller_and_the_client_still_works() {
    let c = cluster();
    let src = pattern(3, BYTES);
    let _replica = publish(&c, &src);

    for serve in [false, true] {
        let calls = AtomicUsize::new(0);
        let explode = |_: u64, _: u64| {
            calls.fetch_add(1, Ordering::Relaxed);
            std::panic::panic_any(Boom(7));
        };
        let request = FetchRequest {
            progress: Some(&explode),
            progress_interval: Some(Duration::ZERO),
            ..FetchRequest::new("m")
        };
        let mut dst = vec![0u8; BYTES];
        let payload = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = c.reader.fetch_with(&request, &mut [TensorMut::bytes("w", &mut dst)], serve);
        }))
        .expect_err("the closure's panic resumes in the caller");
        assert_eq!(payload.downcast_ref::<Boom>(), Some(&Boom(7)), "not the closure's payload");
        assert_eq!(calls.load(Ordering::Relaxed), 1, "called again after it panicked");
    }

    // The client works on, and no replica of the serving fetch was left
    // behind: the publisher is the only holder (a third client's bytes all
    // come from it).
    let mut dst = vec![0u8; BYTES];
    let (version, _) = c.reader.fetch("m", None, 0, &mut [TensorMut::bytes("w", &mut dst)], false).unwrap();
    assert_eq!(version, 1);
    assert!(dst == src, "the fetched bytes differ");
    let third = common::client(c.server.url(), "third");
    let (_, _, stats) =
        third.fetch_with_stats(&FetchRequest::new("m"), &mut [TensorMut::bytes("w", &mut dst)], false).unwrap();
    assert_eq!(stats.bytes_from_publisher, BYTES as u64, "{stats:?}");
    assert!(dst == src, "the fetched bytes differ");
}

#[test]
fn a_panic_in_progress_ends_the_fetch_but_not_the_callers_token() {
    let c = cluster();
    let src = pattern(5, BYTES);
    let _replica = publish(&c, &src);
    // One read in flight: the first call comes after the first chunk, and
    // once the fetch is canceled at most one more lands.
    let config = ClientConfig { max_inflight: 1, ..ClientConfig::new(c.server.url()) };
    let reader = tensorhub::Client::new(&config).unwrap();
    let shutdown = Cancel::new().unwrap();
    let first = AtomicUsize::new(0);
    let explode = |done: u64, _: u64| {
        first.store(done as usize, Ordering::Relaxed);
        std::panic::panic_any(Boom(8));
    };
    let request = FetchRequest {
        progress: Some(&explode),
        progress_interval: Some(Duration::ZERO),
        cancel: Some(&shutdown),
        ..FetchRequest::new("m")
    };
    let mut dst = vec![0u8; BYTES];
    let payload = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = reader.fetch_with(&request, &mut [TensorMut::bytes("w", &mut dst)], false);
    }))
    .expect_err("the closure's panic resumes in the caller");
    assert_eq!(payload.downcast_ref::<Boom>(), Some(&Boom(8)), "not the closure's payload");
    let first = first.into_inner();
    assert!(first < BYTES / 2, "first called with {first} of {BYTES} bytes");
    // Canceled there: the last chunk never came (it would have without the
    // cancel, all 64 of them read one after the other).
    assert!(dst[BYTES - (64 << 10)..].iter().all(|&b| b == 0), "the fetch ran on after the panic");
    assert!(!shutdown.is_canceled(), "the caller's token was canceled");
}
