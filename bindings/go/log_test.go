package tensorhub_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	"tensorhub.dev/tensorhub"
)

// The library's log reaches a Go handler at the level in force; a handler
// that panics changes nothing for the library.
func TestLogLinesReachTheHandlerAtTheLevelInForce(t *testing.T) {
	before := tensorhub.CurrentLogLevel()
	t.Cleanup(func() {
		tensorhub.SetLogHandler(nil)
		_ = tensorhub.SetLogLevel(before)
	})
	var mu sync.Mutex
	var got []string
	levels := map[string]tensorhub.LogLevel{}
	if err := tensorhub.SetLogLevel(tensorhub.LogInfo); err != nil {
		t.Fatal(err)
	}
	if tensorhub.CurrentLogLevel() != tensorhub.LogInfo {
		t.Fatalf("level %v after setting info", tensorhub.CurrentLogLevel())
	}
	tensorhub.SetLogHandler(func(level tensorhub.LogLevel, message string) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, message)
		levels[message] = level
	})
	registered := func(name string) (tensorhub.LogLevel, bool) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range got {
			if strings.Contains(m, "'"+name+"' registered") {
				return levels[m], true
			}
		}
		return 0, false
	}
	s, err := tensorhub.NewServer("tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	connect(t, s.URL(), "heard").Close()
	if level, ok := registered("heard"); !ok || level != tensorhub.LogInfo {
		t.Fatalf("registration line: %v %v in %q", level, ok, got)
	}

	if err := tensorhub.SetLogLevel(tensorhub.LogWarn); err != nil {
		t.Fatal(err)
	}
	connect(t, s.URL(), "unheard").Close()
	if _, ok := registered("unheard"); ok {
		t.Fatal("an info line was logged at warn")
	}
	if err := tensorhub.SetLogLevel(tensorhub.LogLevel(9)); err == nil {
		t.Fatal("an unknown level was taken")
	}

	if err := tensorhub.SetLogLevel(tensorhub.LogDebug); err != nil {
		t.Fatal(err)
	}
	tensorhub.SetLogHandler(func(tensorhub.LogLevel, string) { panic("a handler's bug") })
	c := newCluster(t)
	src := shard(t, 2, 1<<16, 5)
	r, err := c.pub.Publish(tensorhub.PublishConfig{Model: "m", Version: 1}, src)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	dst := shard(t, 2, 1<<16, 0)
	if _, _, err := c.reader.Fetch(context.Background(), "m", 1, 0, dst, false); err != nil {
		t.Fatal(err)
	}
	for i := range src {
		if !bytes.Equal(src[i].Data.Bytes(), dst[i].Data.Bytes()) {
			t.Fatalf("tensor %d differs", i)
		}
	}
}
