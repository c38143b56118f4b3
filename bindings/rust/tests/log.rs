//! The library's log reaches a Rust handler at the level in force; a handler
//! that panics changes nothing for the library.

mod common;

use std::sync::{Arc, Mutex};

use common::{cluster, pattern};
use tensorhub::{LogLevel, PublishConfig, Tensor, TensorMut};

// One test: the log's handler and level are the process's, and the tests of
// one crate run in one process.
#[test]
fn lines_reach_the_handler_at_the_level_in_force() {
    let before = tensorhub::log_level();
    let got: Arc<Mutex<Vec<(LogLevel, String)>>> = Arc::default();
    let sink = got.clone();
    tensorhub::set_log_level(LogLevel::Info).unwrap();
    assert_eq!(tensorhub::log_level(), LogLevel::Info);
    tensorhub::set_log_handler(move |level, message| sink.lock().unwrap().push((level, message.to_owned())));
    drop(cluster()); // its server logs each worker's registration at info
    let registered = |name: &str| {
        got.lock().unwrap().iter().find(|(_, m)| m.contains(&format!("'{name}' registered"))).map(|(l, _)| *l)
    };
    assert_eq!(registered("reader"), Some(LogLevel::Info));

    tensorhub::set_log_level(LogLevel::Warn).unwrap();
    got.lock().unwrap().clear();
    drop(cluster());
    assert_eq!(registered("reader"), None, "an info line logged at warn");

    tensorhub::set_log_level(LogLevel::Debug).unwrap();
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {})); // the panics below are the point: not printed
    tensorhub::set_log_handler(|_, _| panic!("a handler's bug"));
    let c = cluster();
    let src = pattern(7, 1 << 16);
    let replica = c.publisher.publish(&PublishConfig::new("m", 1), &[Tensor::bytes("w0", &src)]).unwrap();
    let mut dst = vec![0u8; src.len()];
    let (version, _) = c.reader.fetch("m", None, 0, &mut [TensorMut::bytes("w0", &mut dst)], false).unwrap();
    assert_eq!((version, &dst), (1, &src));

    drop(replica);
    drop(c);
    tensorhub::reset_log_handler();
    std::panic::set_hook(hook);
    tensorhub::set_log_level(before).unwrap();
}
