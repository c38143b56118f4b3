//! A canceled token ends a fetch with `Status::Canceled`; the buffers can be
//! fetched into again.

mod common;

use common::{cluster, pattern};
use tensorhub::{Cancel, FetchRequest, PublishConfig, Status, Tensor, TensorMut};

#[test]
fn a_token_canceled_before_the_fetch_ends_it_before_its_first_read() {
    let c = cluster();
    let src = pattern(3, 1 << 16);
    let _r = c.publisher.publish(&PublishConfig::new("m", 1), &[Tensor::bytes("w0", &src)]).unwrap();

    let token = Cancel::new().unwrap();
    assert!(!token.is_canceled());
    // Canceled from another thread: the token is Send + Sync.
    std::thread::scope(|s| {
        s.spawn(|| token.cancel());
    });
    assert!(token.is_canceled());
    let mut dst = vec![0u8; src.len()];
    let request = FetchRequest { cancel: Some(&token), ..FetchRequest::new("m") };
    let err = c.reader.fetch_with(&request, &mut [TensorMut::bytes("w0", &mut dst)], false).unwrap_err();
    assert_eq!(err.code, Status::Canceled, "{err}");
    assert!(err.message.contains("canceled before its first read"), "{err}");
    assert_eq!(Status::Canceled.to_string(), "canceled");

    let (version, _) = c.reader.fetch("m", None, 0, &mut [TensorMut::bytes("w0", &mut dst)], false).unwrap();
    assert_eq!(version, 1);
    assert_eq!(dst, src);
}

#[test]
fn a_wait_for_a_version_ends_when_its_token_is_canceled() {
    let c = cluster();
    let token = Cancel::new().unwrap();
    let start = std::time::Instant::now();
    let err = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(200));
            token.cancel();
        });
        c.reader.wait_for_version_cancelable("m", 0, std::time::Duration::from_secs(60), Some(&token)).unwrap_err()
    });
    assert_eq!(err.code, Status::Canceled, "{err}");
    assert!(err.message.contains("canceled while waiting for a version of model 'm'"), "{err}");
    // Not a timing claim: the token ended a wait that had a minute left.
    assert!(start.elapsed() < std::time::Duration::from_secs(30));
}

#[test]
fn a_child_token_is_canceled_with_its_parent_but_not_its_parent_with_it() {
    let c = cluster();
    let src = pattern(4, 1 << 16);
    let _r = c.publisher.publish(&PublishConfig::new("m", 1), &[Tensor::bytes("w0", &src)]).unwrap();

    let shutdown = Cancel::new().unwrap();
    let (one, two) = (shutdown.child().unwrap(), shutdown.child().unwrap());
    let grandchild = two.child().unwrap();
    drop(two); // either may be dropped first
    one.cancel();
    assert!(one.is_canceled() && !shutdown.is_canceled() && !grandchild.is_canceled());

    drop(shutdown); // likewise: the grandchild is on its own now
    let mut dst = vec![0u8; src.len()];
    let request = FetchRequest { cancel: Some(&grandchild), ..FetchRequest::new("m") };
    let (version, _) = c.reader.fetch_with(&request, &mut [TensorMut::bytes("w0", &mut dst)], false).unwrap();
    assert_eq!(version, 1);
    assert_eq!(dst, src);

    let shutdown = Cancel::new().unwrap();
    let child = shutdown.child().unwrap();
    shutdown.cancel();
    assert!(child.is_canceled());
    let request = FetchRequest { cancel: Some(&child), ..FetchRequest::new("m") };
    let err = c.reader.fetch_with(&request, &mut [TensorMut::bytes("w0", &mut dst)], false).unwrap_err();
    assert_eq!(err.code, Status::Canceled, "{err}");
}
