package tensorhub_test

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"tensorhub.dev/tensorhub"
)

// freePort is a TCP port of 127.0.0.1 that nobody listens on just now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startEtcd runs a one-member etcd for the test, killed at its end, and
// returns its client endpoint, "127.0.0.1:port".
func startEtcd(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Skip("needs etcd on PATH (Debian: etcd-server)")
	}
	client := "127.0.0.1:" + strconv.Itoa(freePort(t))
	peer := "http://127.0.0.1:" + strconv.Itoa(freePort(t))
	cmd := exec.Command(bin, "--name", "t", "--data-dir", filepath.Join(t.TempDir(), "etcd"),
		"--listen-client-urls", "http://"+client, "--advertise-client-urls", "http://"+client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "t="+peer)
	if err := cmd.Start(); err != nil { // output goes to /dev/null
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		conn, err := net.DialTimeout("tcp", client, 200*time.Millisecond)
		if err == nil {
			conn.Close()
			return client
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd did not listen on %s within 20 s: %v", client, err)
		}
	}
}

// leader is the one of servers that answers; the others say they are not
// the leader.
func leader(t *testing.T, servers ...*tensorhub.Server) *tensorhub.Server {
	t.Helper()
	for _, s := range servers {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := tensorhub.ServerStatus(ctx, s.URL())
		cancel()
		if err == nil {
			return s
		}
		if !errors.Is(err, tensorhub.ErrUnavailable) || !strings.Contains(err.Error(), "not the leader") {
			t.Fatalf("a server that does not lead: %v, want 'not the leader'", err)
		}
	}
	return nil
}

// Two servers campaign in etcd; clients follow the leader through an
// etcd:// URL, and the other server takes over when the leader closes.
func TestClientsFollowTheLeaderEtcdNames(t *testing.T) {
	etcd := startEtcd(t)
	cfg := tensorhub.ServerConfig{EtcdEndpoints: etcd, EtcdLease: 2 * time.Second}
	first, second := newServer(t, cfg), newServer(t, cfg)
	url := "etcd://" + etcd + "/tensorhub"
	follow := func(name string) *tensorhub.Client {
		c, err := tensorhub.NewClient(tensorhub.ClientConfig{ServerURL: url, WorkerName: name, Timeout: 10 * time.Second,
			Heartbeat: 100 * time.Millisecond})
		if err != nil {
			t.Fatalf("connect %s through %s: %v", name, url, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	pub, reader := follow("pub"), follow("reader")
	ctx := context.Background()

	src := shard(t, 2, size, 21)
	publish(t, pub, "m", 1, src)
	lead := leader(t, first, second)
	if lead == nil {
		t.Fatal("neither server leads")
	}
	other := first
	if lead == first {
		other = second
	}
	dst := shard(t, 2, size, 0)
	if v, _, err := reader.Fetch(ctx, "m", tensorhub.Latest, 0, dst, false); err != nil || v != 1 {
		t.Fatalf("fetch from the first leader: v=%d err=%v", v, err)
	}
	sameBytes(t, dst, src)

	// The leader resigns; the other is elected, and the workers register
	// there again with what they hold.
	lead.Close()
	for deadline := time.Now().Add(30 * time.Second); leader(t, other) == nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the other server did not take over within 30 s")
		}
	}
	dst = shard(t, 2, size, 0)
	if v, _, err := reader.Fetch(ctx, "m", 1, 0, dst, false); err != nil || v != 1 {
		t.Fatalf("fetch from the new leader: v=%d err=%v", v, err)
	}
	sameBytes(t, dst, src)
	publish(t, pub, "m", 2, shard(t, 2, size, 22))
	if v, err := reader.Resolve("m", tensorhub.Latest); err != nil || v != 2 {
		t.Fatalf("resolve after publishing v2 on the new leader: v=%d err=%v", v, err)
	}
}

// Settings etcd mode cannot work with are refused when the server starts,
// with a message that names the setting. (No etcd is needed.)
func TestBadEtcdSettingsAreRefused(t *testing.T) {
	for _, c := range []struct {
		cfg  tensorhub.ServerConfig
		text string
	}{
		{tensorhub.ServerConfig{EtcdEndpoints: "127.0.0.1:1", EtcdPrefix: "noslash"}, "must start with '/'"},
		{tensorhub.ServerConfig{EtcdEndpoints: "nohost"}, "not host:port"},
		{tensorhub.ServerConfig{ListenURL: "tcp://0.0.0.0:0", EtcdEndpoints: "127.0.0.1:1"}, "advertise_url"},
		{tensorhub.ServerConfig{EtcdEndpoints: "127.0.0.1:1", EtcdLease: -time.Second}, "etcd lease is negative"},
	} {
		s, err := tensorhub.NewServerWithConfig(c.cfg)
		if err == nil {
			s.Close()
			t.Fatalf("%+v was taken", c.cfg)
		}
		wantCode(t, err, tensorhub.StatusInvalidArg, c.text)
	}
	// A wildcard address is fine with the URL clients reach it at.
	port := strconv.Itoa(freePort(t))
	s, err := tensorhub.NewServerWithConfig(tensorhub.ServerConfig{ListenURL: "tcp://0.0.0.0:" + port,
		EtcdEndpoints: "127.0.0.1:1", AdvertiseURL: "tcp://127.0.0.1:" + port})
	if err != nil {
		t.Fatalf("a wildcard listen URL with an advertise URL: %v", err)
	}
	s.Close()
}
