package tensorhub

import "testing"

// A zero field means the library's default; the Default* constants must name
// exactly those values.
func TestDefaultsAreTheLibrarysDefaults(t *testing.T) {
	server, client, publish, fetch := libraryDefaults()
	want := ServerConfig{ListenURL: DefaultListenURL, Lease: DefaultLease, MaxReadersPerSource: DefaultMaxReadersPerSource,
		Stripes: DefaultStripes, EtcdPrefix: DefaultEtcdPrefix, EtcdLease: DefaultEtcdLease}
	if server != want {
		t.Errorf("server defaults: library %+v, constants %+v", server, want)
	}
	wantClient := ClientConfig{
		Timeout: DefaultTimeout, Heartbeat: DefaultHeartbeat, ChunkTimeout: DefaultChunkTimeout,
		MaxInflight: DefaultMaxInflight, Retention: DefaultRetention, MutationWait: DefaultMutationWait,
		SpillPoolBytes: DefaultSpillPoolBytes, SpillAhead: DefaultSpillAhead, CopyThreads: DefaultCopyThreads,
	}
	if client != wantClient {
		t.Errorf("client defaults: library %+v, constants %+v", client, wantClient)
	}
	wantPublish := PublishConfig{NumShards: DefaultNumShards, ChunkBytes: DefaultChunkBytes, NoChecksums: !DefaultChecksums}
	if publish != wantPublish {
		t.Errorf("publish defaults: library %+v, constants %+v", publish, wantPublish)
	}
	wantFetch := fetchDefaults{Verify: DefaultVerify, ProgressInterval: DefaultProgressInterval}
	if fetch != wantFetch {
		t.Errorf("fetch defaults: library %+v, constants %+v", fetch, wantFetch)
	}
}
