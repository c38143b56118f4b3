//! Shared by the integration tests: an embedded server with two clients.
#![allow(dead_code)] // each test crate uses a different subset

use std::time::Duration;
use tensorhub::{Client, ClientConfig, Server};

/// Fields drop in order: clients withdraw their replicas before the server stops.
pub struct Cluster {
    pub publisher: Client,
    pub reader: Client,
    pub server: Server,
}

pub fn client(url: &str, name: &str) -> Client {
    let config = ClientConfig {
        worker_name: Some(name.into()),
        timeout: Duration::from_secs(5),
        heartbeat: Duration::from_millis(100),
        ..ClientConfig::new(url)
    };
    Client::new(&config).unwrap_or_else(|e| panic!("connect {name}: {e}"))
}

pub fn cluster() -> Cluster {
    let server = Server::new("tcp://127.0.0.1:0").expect("server");
    Cluster { publisher: client(server.url(), "pub"), reader: client(server.url(), "reader"), server }
}

/// Deterministic bytes that differ per seed and per position.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
