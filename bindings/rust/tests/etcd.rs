//! Metadata-server HA on etcd: two embedded servers campaign in a real etcd
//! (started here), clients follow the leader through an etcd:// URL, and the
//! other server takes over when the leader goes. Skipped, saying why, when
//! `etcd` is not on PATH (Debian: etcd-server). Killing a leader and
//! partitioning it are tested by tests/system/ha_test.py.

mod common;

use common::pattern;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tensorhub::{Client, ClientConfig, PublishConfig, Server, ServerConfig, Status, Tensor, TensorMut};

/// A free port on 127.0.0.1 (free when asked; etcd binds it right after).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn on_path(program: &str) -> bool {
    let Some(path) = std::env::var_os("PATH") else { return false };
    std::env::split_paths(&path).any(|dir| dir.join(program).is_file())
}

/// An etcd of its own in a temporary data directory. Dropping it (also while
/// a failed assertion unwinds) kills the process and removes the directory.
struct Etcd {
    child: Child,
    data: PathBuf,
    /// "127.0.0.1:<port>" of its client URL.
    endpoint: String,
}

impl Etcd {
    fn start() -> Etcd {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().subsec_nanos();
        let data = std::env::temp_dir().join(format!("th-etcd-{}-{nanos}", std::process::id()));
        let endpoint = format!("127.0.0.1:{}", free_port());
        let client_url = format!("http://{endpoint}");
        let peer_url = format!("http://127.0.0.1:{}", free_port());
        let child = Command::new("etcd")
            .args(["--name", "t", "--data-dir"])
            .arg(&data)
            .args(["--listen-client-urls", &client_url, "--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url, "--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("t={peer_url}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start etcd");
        let etcd = Etcd { child, data, endpoint };
        let addr: SocketAddr = etcd.endpoint.parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            assert!(Instant::now() < deadline, "etcd did not listen on {addr} within 20 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        etcd
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data);
    }
}

fn etcd_server(endpoint: &str) -> Server {
    let config = ServerConfig {
        etcd_endpoints: Some(endpoint.into()),
        etcd_lease: Duration::from_secs(2),
        ..ServerConfig::default()
    };
    Server::with_config(&config).unwrap()
}

fn connect(url: &str, name: &str) -> Client {
    let config =
        ClientConfig { worker_name: Some(name.into()), timeout: Duration::from_secs(10), ..ClientConfig::new(url) };
    Client::new(&config).unwrap_or_else(|e| panic!("connect {name}: {e}"))
}

/// Which of `servers` leads: the one whose status answers; the others say
/// they are not the leader.
fn leader(servers: &[&Server]) -> Option<usize> {
    servers.iter().position(|s| match tensorhub::server_status(s.url(), Duration::from_secs(1)) {
        Ok(_) => true,
        Err(e) => {
            assert_eq!(e.code, Status::Unavailable, "{e}");
            assert!(e.message.contains("not the leader"), "{e}");
            false
        }
    })
}

/// Fetches "m" (`version`; `None`: the newest), checks the bytes are `want`
/// and returns the version delivered.
fn fetch(reader: &Client, version: Option<u64>, want: &[u8]) -> u64 {
    let mut dst = vec![0u8; want.len()];
    let (got, _) = reader.fetch("m", version, 0, &mut [TensorMut::bytes("w", &mut dst)], false).unwrap();
    assert!(dst == want, "the bytes of version {got} differ");
    got
}

#[test]
fn clients_follow_the_leader() {
    if !on_path("etcd") {
        eprintln!("skipped: needs etcd on PATH (Debian: etcd-server)");
        return;
    }
    // Dropped last: the servers and clients below go first.
    let etcd = Etcd::start();
    let mut servers = [Some(etcd_server(&etcd.endpoint)), Some(etcd_server(&etcd.endpoint))];
    let url = format!("etcd://{}/tensorhub", etcd.endpoint);
    let publisher = connect(&url, "pub");
    let reader = connect(&url, "reader");

    let v1 = pattern(1, 256 << 10);
    let _r1 = publisher.publish(&PublishConfig::new("m", 1), &[Tensor::bytes("w", &v1)]).unwrap();
    let status = tensorhub::server_status(&url, Duration::from_secs(5)).unwrap(); // etcd:// works here too
    assert!(status.contains("\"pub\""), "{status}");
    let both: Vec<&Server> = servers.iter().flatten().collect();
    let first = leader(&both).expect("one of the two servers leads");
    assert_eq!(fetch(&reader, None, &v1), 1);

    // The leader resigns; the other is elected at once and the workers
    // register there again, with what they hold.
    servers[first] = None;
    let follower = servers[1 - first].as_ref().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while leader(&[follower]).is_none() {
        assert!(Instant::now() < deadline, "the other server was not elected within 30 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(fetch(&reader, Some(1), &v1), 1);
    let v2 = pattern(2, 256 << 10);
    let _r2 = publisher.publish(&PublishConfig::new("m", 2), &[Tensor::bytes("w", &v2)]).unwrap();
    assert_eq!(reader.resolve("m", None).unwrap(), 2);
    assert_eq!(fetch(&reader, None, &v2), 2);
}

#[test]
fn bad_etcd_settings_are_refused() {
    // Refused before any connection to etcd: none needs to run.
    let refused = |config: ServerConfig, needle: &str| {
        let err = Server::with_config(&config).unwrap_err();
        assert_eq!(err.code, Status::InvalidArg, "{err}");
        assert!(err.message.contains(needle), "{needle:?} not in {err}");
    };
    let etcd = |endpoints: &str| ServerConfig { etcd_endpoints: Some(endpoints.into()), ..ServerConfig::default() };
    refused(ServerConfig { etcd_prefix: "noslash".into(), ..etcd("127.0.0.1:1") }, "must start with '/'");
    refused(etcd("nohost"), "not host:port");
    let wildcard = ServerConfig { listen_url: "tcp://0.0.0.0:0".into(), ..etcd("127.0.0.1:1") };
    refused(wildcard.clone(), "advertise_url");
    // With the URL clients reach it at, the same server starts (and
    // campaigns in the background for an etcd that is not there).
    let advertised = ServerConfig { advertise_url: Some("tcp://127.0.0.1:9".into()), ..wildcard };
    Server::with_config(&advertised).unwrap();
}
