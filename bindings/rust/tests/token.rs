//! A cluster token: a server with one serves only peers with the same one,
//! and `Debug` never shows it.
//!
//! A crate of its own: it removes `$TENSORHUB_TOKEN` (which the library falls
//! back to) from the process's environment, and the other test crates must
//! not see that happen while their threads run.

mod common;

use common::pattern;
use std::time::Duration;
use tensorhub::{Client, ClientConfig, PublishConfig, Server, ServerConfig, Status, Tensor, TensorMut};

const TOKEN: &str = "s3cret";

fn connect(url: &str, name: &str, token: Option<&str>) -> tensorhub::Result<Client> {
    let config = ClientConfig {
        worker_name: Some(name.into()),
        timeout: Duration::from_secs(5),
        token: token.map(Into::into),
        ..ClientConfig::new(url)
    };
    Client::new(&config)
}

// One test, so that the environment changes before any thread of the
// library (or of another test of this crate) can read it.
#[test]
fn only_peers_with_the_cluster_token_are_served() {
    std::env::remove_var("TENSORHUB_TOKEN");
    let server = Server::with_config(&ServerConfig { token: Some(TOKEN.into()), ..ServerConfig::default() }).unwrap();

    let err = connect(server.url(), "intruder", None).unwrap_err();
    assert_eq!(err.code, Status::Auth, "{err}");
    assert!(err.message.contains("cluster token"), "{err}");
    let err = connect(server.url(), "guesser", Some("guess")).unwrap_err();
    assert_eq!(err.code, Status::Auth, "{err}");
    assert!(err.message.contains("cluster token"), "{err}");
    let err = tensorhub::server_status(server.url(), Duration::from_secs(2)).unwrap_err();
    assert_eq!(err.code, Status::Auth, "{err}");

    let publisher = connect(server.url(), "pub", Some(TOKEN)).unwrap();
    let reader = connect(server.url(), "reader", Some(TOKEN)).unwrap();
    let src = pattern(5, 256 << 10);
    let _replica = publisher.publish(&PublishConfig::new("m", 1), &[Tensor::bytes("w", &src)]).unwrap();
    let mut dst = vec![0u8; src.len()];
    let (version, _) = reader.fetch("m", None, 0, &mut [TensorMut::bytes("w", &mut dst)], false).unwrap();
    assert_eq!(version, 1);
    assert_eq!(dst, src);
    // The refused peers left no trace.
    let status = reader.status().unwrap();
    assert!(!status.contains("intruder") && !status.contains("guesser"), "{status}");

    // And the other way round: a client with a token refuses a server without.
    let open = Server::new("tcp://127.0.0.1:0").unwrap();
    let err = connect(open.url(), "careful", Some(TOKEN)).unwrap_err();
    assert_eq!(err.code, Status::Auth, "{err}");
    assert!(err.message.contains("cluster token"), "{err}");
}

#[test]
fn debug_output_does_not_show_the_token() {
    let server = ServerConfig { token: Some(TOKEN.into()), ..ServerConfig::default() };
    let client = ClientConfig { token: Some(TOKEN.into()), ..ClientConfig::new("tcp://127.0.0.1:1") };
    for text in [format!("{server:?}"), format!("{client:?}"), format!("{server:#?}"), format!("{client:#?}")] {
        assert!(!text.contains(TOKEN), "the token is in {text}");
        assert!(text.contains("<redacted>"), "{text}");
    }
    assert!(format!("{client:?}").contains("token: Some(<redacted>)"));
    // The other fields are still shown.
    assert!(format!("{client:?}").contains("tcp://127.0.0.1:1"));
    assert!(format!("{server:?}").contains("etcd_prefix: \"/tensorhub\""));
    assert!(format!("{:?}", ServerConfig::default()).contains("token: None"));
}
