package tensorhub_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"tensorhub.dev/tensorhub"
)

// noEnvToken unsets $TENSORHUB_TOKEN for the test (restored after it): an
// empty Token means the environment's. (The library would also read an
// empty variable as no token, but unset leaves no doubt.)
func noEnvToken(t *testing.T) {
	t.Setenv("TENSORHUB_TOKEN", "") // restores the old value at the end
	if err := os.Unsetenv("TENSORHUB_TOKEN"); err != nil {
		t.Fatal(err)
	}
}

func newServer(t *testing.T, cfg tensorhub.ServerConfig) *tensorhub.Server {
	t.Helper()
	s, err := tensorhub.NewServerWithConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func connectWith(t *testing.T, cfg tensorhub.ClientConfig) (*tensorhub.Client, error) {
	t.Helper()
	cfg.Timeout, cfg.Heartbeat = 5*time.Second, 100*time.Millisecond
	c, err := tensorhub.NewClient(cfg)
	if err == nil {
		t.Cleanup(func() { c.Close() }) // before the server's: cleanups run last-in first-out
	}
	return c, err
}

// A server with a cluster token serves only clients with the same token.
func TestOnlyClientsWithTheClusterTokenAreServed(t *testing.T) {
	noEnvToken(t)
	s := newServer(t, tensorhub.ServerConfig{Token: "s3cret"})
	for _, token := range []string{"", "guess"} {
		_, err := connectWith(t, tensorhub.ClientConfig{ServerURL: s.URL(), WorkerName: "intruder", Token: token})
		if !errors.Is(err, tensorhub.ErrAuth) {
			t.Fatalf("a client with token %q: %v, want ErrAuth", token, err)
		}
	}
	pub, err := connectWith(t, tensorhub.ClientConfig{ServerURL: s.URL(), WorkerName: "pub", Token: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	reader, err := connectWith(t, tensorhub.ClientConfig{ServerURL: s.URL(), WorkerName: "reader", Token: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	src := shard(t, 2, size, 41)
	publish(t, pub, "m", 1, src)
	dst := shard(t, 2, size, 0)
	if v, _, err := reader.Fetch(context.Background(), "m", tensorhub.Latest, 0, dst, false); err != nil || v != 1 {
		t.Fatalf("fetch with the token: v=%d err=%v", v, err)
	}
	sameBytes(t, dst, src)
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s\n%s", url, resp.Status, body)
	}
	return string(body)
}

// A server with a MetricsURL serves Prometheus metrics there, and its
// status document next to them.
func TestMetricsURLServesPrometheusMetrics(t *testing.T) {
	s := newServer(t, tensorhub.ServerConfig{MetricsURL: "http://127.0.0.1:0"})
	metrics := s.MetricsURL()
	if !strings.HasPrefix(metrics, "http://127.0.0.1:") || strings.HasPrefix(metrics, "http://127.0.0.1:0/") ||
		!strings.HasSuffix(metrics, "/metrics") {
		t.Fatalf("MetricsURL() = %q, want http://127.0.0.1:<real port>/metrics", metrics)
	}
	pub, reader := connect(t, s.URL(), "pub"), connect(t, s.URL(), "reader")
	defer pub.Close()
	defer reader.Close()
	publish(t, pub, "m", 1, shard(t, 1, size, 3))
	if _, _, err := reader.Fetch(context.Background(), "m", tensorhub.Latest, 0, shard(t, 1, size, 0), false); err != nil {
		t.Fatal(err)
	}
	if text := httpGet(t, metrics); !strings.Contains(text, "\ntensorhub_versions_committed_total 1\n") {
		t.Fatalf("GET %s lacks tensorhub_versions_committed_total 1:\n%s", metrics, text)
	}
	status := httpGet(t, strings.TrimSuffix(metrics, "/metrics")+"/api/status")
	if !strings.Contains(status, `"m"`) {
		t.Fatalf("the status document lacks model m: %s", status)
	}

	if plain := newServer(t, tensorhub.ServerConfig{}); plain.MetricsURL() != "" {
		t.Fatalf("a server without MetricsURL has MetricsURL() %q", plain.MetricsURL())
	}
}

// A standby cannot tell a model nobody published from one whose holders
// have not declared it to it yet: a reader asks again until it appears, or
// until its timeout, instead of failing at once as an ordinary server makes
// it.
func TestAStandbyMakesReadersAskAgainForWhatItDoesNotKnow(t *testing.T) {
	plain := newServer(t, tensorhub.ServerConfig{})
	reader := connect(t, plain.URL(), "reader")
	defer reader.Close()
	start := time.Now()
	if _, err := reader.Resolve("m", tensorhub.Latest); !errors.Is(err, tensorhub.ErrNotFound) {
		t.Fatalf("an unknown model on an ordinary server: %v, want ErrNotFound", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("an ordinary server took %v to say it does not know the model", took)
	}

	standby := newServer(t, tensorhub.ServerConfig{Standby: true})
	reader = connect(t, standby.URL(), "reader")
	defer reader.Close()
	type answer struct {
		version uint64
		err     error
		after   time.Duration
	}
	resolved := make(chan answer, 1)
	start = time.Now()
	go func() {
		v, err := reader.Resolve("m", tensorhub.Latest) // nothing is published yet
		resolved <- answer{v, err, time.Since(start)}
	}()
	time.Sleep(300 * time.Millisecond)
	pub := connect(t, standby.URL(), "pub")
	defer pub.Close()
	publish(t, pub, "m", 1, shard(t, 1, 4096, 1))
	a := <-resolved
	if a.err != nil || a.version != 1 {
		t.Fatalf("Resolve on the standby: v=%d err=%v after %v, want version 1", a.version, a.err, a.after)
	}
	if a.after < 300*time.Millisecond {
		t.Fatalf("Resolve answered after %v, before anything was published", a.after)
	}

	// Nobody ever publishes "nope": not found, but only once the client's
	// timeout ran out.
	impatient, err := tensorhub.NewClient(tensorhub.ClientConfig{ServerURL: standby.URL(), WorkerName: "impatient",
		Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer impatient.Close()
	start = time.Now()
	if _, err := impatient.Resolve("nope", tensorhub.Latest); !errors.Is(err, tensorhub.ErrNotFound) {
		t.Fatalf("a model nobody publishes, on a standby: %v, want ErrNotFound", err)
	}
	if took := time.Since(start); took < 500*time.Millisecond {
		t.Fatalf("the standby said 'not found' after %v, without asking again", took)
	}
}
