//! Failures map to the right `Status` with the library's message.

mod common;

use common::{cluster, pattern};
use std::time::{Duration, Instant};
use tensorhub::{Client, ClientConfig, DType, PublishConfig, Status, Tensor, TensorMut};

#[test]
fn unknown_model_is_not_found_and_named() {
    let c = cluster();
    let mut buf = vec![0u8; 16];
    let err = c.reader.fetch("nope", None, 0, &mut [TensorMut::bytes("w", &mut buf)], false).unwrap_err();
    assert_eq!(err.code, Status::NotFound, "{err}");
    assert!(err.message.contains("'nope'"), "{err}");
    assert_eq!(c.reader.resolve("nope", None).unwrap_err().code, Status::NotFound);
    // Display and std::error::Error for `?` into Box<dyn Error>.
    let boxed: Box<dyn std::error::Error> = Box::new(err.clone());
    assert_eq!(boxed.to_string(), format!("tensorhub: not found: {}", err.message));
}

#[test]
fn unreachable_server_is_unavailable_within_the_timeout() {
    let config = ClientConfig { timeout: Duration::from_millis(300), ..ClientConfig::new("tcp://127.0.0.1:1") };
    let t0 = Instant::now();
    let err = Client::new(&config).unwrap_err();
    assert_eq!(err.code, Status::Unavailable, "{err}");
    assert!(err.message.contains("tcp://127.0.0.1:1"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(5), "took {:?}", t0.elapsed());

    let err = tensorhub::server_status("tcp://127.0.0.1:1", Duration::from_millis(300)).unwrap_err();
    assert_eq!(err.code, Status::Unavailable, "{err}");
}

#[test]
fn layout_mismatch_names_the_tensor() {
    let c = cluster();
    let src = pattern(1, 4096);
    let _r = c.publisher.publish(&PublishConfig::new("m", 1), &[Tensor::bytes("w0", &src)]).unwrap();
    let mut small = vec![0u8; 2048];
    let err = c.reader.fetch("m", Some(1), 0, &mut [TensorMut::bytes("w0", &mut small)], false).unwrap_err();
    assert_eq!(err.code, Status::LayoutMismatch, "{err}");
    assert!(err.message.contains("'w0' has 4096 bytes, 2048 given"), "{err}");
}

#[test]
fn conflicting_publish_and_bad_arguments() {
    let c = cluster();
    let src = pattern(1, 4096);
    let _r = c.publisher.publish(&PublishConfig::new("m", 1), &[Tensor::bytes("w0", &src)]).unwrap();
    let other = pattern(2, 2048);
    let err = c.reader.publish(&PublishConfig::new("m", 1), &[Tensor::bytes("w0", &other)]).unwrap_err();
    assert_eq!(err.code, Status::Conflict, "{err}");

    // Rejected by the library: nbytes disagrees with dtype x shape.
    let err = c.publisher.publish(&PublishConfig::new("m", 2), &[Tensor::new("w0", DType::Float32, &[3], &src)]);
    assert_eq!(err.unwrap_err().code, Status::InvalidArg);
    // Rejected by the bindings before C sees them.
    let err = c.reader.resolve("a\0b", None).unwrap_err();
    assert_eq!(err.code, Status::InvalidArg);
    let err = c.publisher.publish(&PublishConfig::new("m", 2), &[Tensor::new("w0", DType::UInt8, &[1; 9], &src)]);
    assert!(err.unwrap_err().message.contains("ndim 9"));
}

/// th_last_error is per thread: concurrent failures keep their own messages.
#[test]
fn messages_do_not_leak_between_threads() {
    let c = cluster();
    std::thread::scope(|s| {
        for i in 0..4 {
            let reader = &c.reader;
            s.spawn(move || {
                for _ in 0..20 {
                    let model = format!("missing-{i}");
                    let err = reader.resolve(&model, None).unwrap_err();
                    assert!(err.message.contains(&model), "{err}");
                }
            });
        }
    });
}
