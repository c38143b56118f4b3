//! The embedded server's settings beyond the defaults: the HTTP metrics
//! endpoint and standby mode. (Token: token.rs; etcd: etcd.rs.)

mod common;

use common::{client, pattern};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use tensorhub::{ClientConfig, PublishConfig, Server, ServerConfig, Status, Tensor, TensorMut};

/// GET `url` ("http://host:port/path") over HTTP/1.0: the status line and the
/// body. Plain std, so that the test needs no HTTP crate.
fn http_get(url: &str) -> (String, String) {
    let rest = url.strip_prefix("http://").unwrap_or_else(|| panic!("not an http:// URL: {url}"));
    let (host, path) = rest.find('/').map_or((rest, "/"), |i| (&rest[..i], &rest[i..]));
    let mut stream = TcpStream::connect(host).unwrap_or_else(|e| panic!("connect {host}: {e}"));
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no header end in {reply:?}"));
    (head.lines().next().unwrap_or_default().to_owned(), body.to_owned())
}

/// The value of the sample `series` (name and labels) in Prometheus text.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

#[test]
fn the_metrics_endpoint_reports_what_happened() {
    let plain = Server::new("tcp://127.0.0.1:0").unwrap();
    assert_eq!(plain.metrics_url(), None);

    let config = ServerConfig { metrics_url: Some("http://127.0.0.1:0".into()), ..ServerConfig::default() };
    let server = Server::with_config(&config).unwrap();
    let url = server.metrics_url().expect("metrics_url was set").to_owned();
    assert!(url.starts_with("http://127.0.0.1:") && !url.contains(":0/") && url.ends_with("/metrics"), "{url}");

    let publisher = client(server.url(), "pub");
    let reader = client(server.url(), "reader");
    let src = pattern(9, 256 << 10);
    let _replica = publisher.publish(&PublishConfig::new("m", 1), &[Tensor::bytes("w", &src)]).unwrap();
    let mut dst = vec![0u8; src.len()];
    reader.fetch("m", None, 0, &mut [TensorMut::bytes("w", &mut dst)], false).unwrap();

    let (status, text) = http_get(&url);
    assert!(status.starts_with("HTTP/1.") && status.contains(" 200"), "{status}");
    assert!(text.contains("\ntensorhub_versions_committed_total 1\n"), "{text}");
    assert_eq!(sample(&text, "tensorhub_latest_version{model=\"m\"}"), Some(1.0), "{text}");
    assert_eq!(sample(&text, "tensorhub_fetch_seconds_count"), Some(1.0), "{text}");

    // The status document the live page polls, at the same host and port.
    let base = url.strip_suffix("/metrics").unwrap();
    let json = tensorhub::server_status(base, Duration::from_secs(5)).unwrap();
    assert!(json.contains("\"pub\"") && json.contains("\"reader\""), "{json}");
}

#[test]
fn a_standby_asks_readers_to_ask_again_until_holders_arrive() {
    // An active server knows it knows everything: an unknown model fails at once.
    let active = Server::new("tcp://127.0.0.1:0").unwrap();
    let reader = client(active.url(), "reader");
    let started = Instant::now();
    let err = reader.resolve("m", None).unwrap_err();
    assert_eq!(err.code, Status::NotFound, "{err}");
    // Not a timing claim: a reader that kept asking would end at its 5 s timeout.
    assert!(started.elapsed() < Duration::from_millis(2500), "took {:?}", started.elapsed());
    drop(reader);
    drop(active);

    // A standby cannot tell "unknown" from "not declared to me yet": the
    // reader keeps asking within its timeout, and the publisher that arrives
    // meanwhile answers it.
    let standby = Server::with_config(&ServerConfig { standby: true, ..ServerConfig::default() }).unwrap();
    let config = ClientConfig { timeout: Duration::from_secs(10), ..ClientConfig::new(standby.url()) };
    let reader = tensorhub::Client::new(&config).unwrap();
    let publisher = client(standby.url(), "pub");
    let src = pattern(4, 4096);
    std::thread::scope(|s| {
        let asking = s.spawn(|| reader.resolve("m", None));
        std::thread::sleep(Duration::from_millis(300));
        assert!(!asking.is_finished(), "the standby answered before anything was published: {:?}", asking.join());
        let _replica = publisher.publish(&PublishConfig::new("m", 1), &[Tensor::bytes("w", &src)]).unwrap();
        assert_eq!(asking.join().unwrap().unwrap(), 1);
    });
    // Asked about a model nobody declares, a standby keeps the reader asking
    // until the reader's own timeout, and only then is it told NotFound.
    let impatient = ClientConfig { timeout: Duration::from_secs(1), ..ClientConfig::new(standby.url()) };
    let impatient = tensorhub::Client::new(&impatient).unwrap();
    let started = Instant::now();
    let err = impatient.resolve("never", None).unwrap_err();
    assert_eq!(err.code, Status::NotFound, "{err}");
    assert!(err.message.contains("this server is a standby that has not taken over"), "{err}");
    assert!(started.elapsed() >= Duration::from_millis(500), "answered after {:?}", started.elapsed());
}
