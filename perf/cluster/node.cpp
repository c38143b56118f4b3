// tensorhub-cluster-node: one emulated host's program in the cluster benchmark
// (perf/cluster/cluster.py runs it inside the host's network namespace).
// Speaks the line protocol of node_io.hpp.
//
// tensorhub roles (public API only):
//   --role trainer   publishes S bytes at T0, then at once begins to mutate
//                    its buffers (th_replica_begin_mutation; the retention
//                    policy spills the version into an owned copy that keeps
//                    serving) and overwrites them. Reports its stall. Before
//                    T0 it goes through the same steps for two earlier
//                    versions, as a training loop has by then: the memory
//                    for owned copies is what a running trainer has.
//   --role reader    at T0 + --ready-offset waits for the version, fetches it
//                    and serves it on (pipelined replication).
// trainer-direct baseline (plain UCX, what a point-to-point setup does):
//   --role direct-target  exposes the S bytes; writes its UCX address and
//                         rkey to --info FILE before it is armed
//   --role direct-reader  connects to it before T0; at T0 + --ready-offset
//                         GETs the whole buffer from it
//
// Common options: --bytes S --tensors T (default 4) --chunk-kb C --inflight I
// --ready-offset SECONDS. tensorhub: --server URL --model NAME --labels L
// --mutation-wait-ms MS (trainer), --keep (the trainer does not mutate).
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "args.hpp"
#include "bench_util.hpp"
#include "host_shard.hpp"
#include "node_io.hpp"
#include "raw_ucx.hpp"
#include "tensorhub/tensorhub.h"

using namespace th_cluster;
using th_bench::fail;
using th_bench::PageBuffer;
using th_bench::str;

namespace {

struct Options {
    Payload payload{0, 4};
    uint64_t chunk_bytes = 1ull << 20;
    unsigned inflight = 8;
    double ready_offset = 0;
    std::string server, model, labels, info;
    uint32_t mutation_wait_ms = 0;
    bool keep = false;  // the trainer keeps its weights (and serves them)
};

void check(th_status st, const char *what) {
    if (st != TH_OK) fail(what, ": ", th_status_str(st), ": ", th_last_error());
}

// Slower than 5 MB/s means stuck, not slow.
uint32_t deadline_ms(uint64_t bytes) { return static_cast<uint32_t>(60000 + bytes / 5000); }

// The payload in page-backed memory, faulted in, with the tensorhub views of
// its pieces.
struct Shard {
    PageBuffer buffer;
    std::vector<std::string> names;
    std::vector<th_tensor> views;
    explicit Shard(const Payload &p) : buffer(p.bytes) {
        buffer.clear();
        for (unsigned t = 0; t < p.tensors; ++t) names.push_back("layers." + std::to_string(t) + ".weight");
        for (unsigned t = 0; t < p.tensors; ++t)
            views.push_back(th_tools::host_tensor(names[t].c_str(), TH_DTYPE_FLOAT32, buffer.data() + t * p.piece(), p.piece()));
    }
};

using ClientPtr = std::unique_ptr<th_client, decltype(&th_client_destroy)>;

ClientPtr connect(const Options &o, const std::string &name) {
    th_client_config cfg;
    th_client_config_init(&cfg, sizeof cfg);
    cfg.server_url = o.server.c_str();
    cfg.worker_name = name.c_str();
    if (!o.labels.empty()) cfg.labels = o.labels.c_str();
    cfg.max_inflight = o.inflight;
    cfg.retention = TH_RETAIN_SPILL;
    cfg.mutation_wait_ms = o.mutation_wait_ms;
    th_client *c = nullptr;
    check(th_client_create(&c, &cfg), "connecting to the server");
    return ClientPtr(c, th_client_destroy);
}

std::string host_name() {
    char buf[256] = {};
    gethostname(buf, sizeof buf - 1);
    return buf;
}

int run_trainer(const Options &o) {
    ClientPtr client = connect(o, "trainer");
    Shard shard(o.payload);
    auto publish = [&](uint64_t version) {
        th_publish_config pc;
        th_publish_config_init(&pc, sizeof pc);
        pc.model = o.model.c_str();
        pc.version = version;
        pc.chunk_bytes = o.chunk_bytes;
        th_replica *replica = nullptr;
        check(th_publish(client.get(), &pc, shard.views.data(), shard.views.size(), &replica), "publishing");
        return replica;
    };
    // Earlier steps of the loop: publish, mutate, publish the next version,
    // release the previous handle. Readers wait for the timed version.
    th_replica *previous = nullptr;
    for (uint64_t v = 1; v < Payload::kVersion; ++v) {
        std::memset(shard.buffer.data(), static_cast<int>(v), shard.buffer.size());
        th_replica *r = publish(v);
        if (previous) check(th_replica_release(previous), "releasing an earlier version");
        if (!o.keep) check(th_replica_begin_mutation(r), "beginning the mutation of an earlier version");
        previous = r;
    }
    o.payload.fill(shard.buffer.data());
    double t0 = wait_for_start();
    sleep_until(t0);
    double start = wall_now();
    th_replica *replica = publish(Payload::kVersion);
    double published = wall_now();
    if (previous) check(th_replica_release(previous), "releasing the previous version");
    double free_at = published;
    if (!o.keep) {
        check(th_replica_begin_mutation(replica), "beginning the mutation");
        free_at = wall_now();
        // The optimizer step: the buffers no longer hold the version.
        std::memset(shard.buffer.data(), 0xA5, shard.buffer.size());
    }
    emit(str("{\"role\":\"trainer\",\"published\":", fixed(published), ",\"stall_s\":", fixed(free_at - start),
             ",\"free\":", fixed(free_at), "}"));
    serve_until_quit([] { return true; });
    check(th_replica_release(replica), "releasing");
    return 0;
}

int run_reader(const Options &o) {
    ClientPtr client = connect(o, "reader-" + host_name() + "-" + std::to_string(getpid()));
    Shard shard(o.payload);
    double t0 = wait_for_start();
    sleep_until(t0 + o.ready_offset);
    double ready = wall_now();
    uint32_t limit = deadline_ms(o.payload.bytes);
    uint64_t version = 0;
    check(th_wait_for_version(client.get(), o.model.c_str(), Payload::kVersion - 1, limit, &version),
          "waiting for the version");
    th_fetch_config fc;
    th_fetch_config_init(&fc, sizeof fc);
    fc.model = o.model.c_str();
    fc.version = version;
    fc.timeout_ms = limit;
    th_replica *replica = nullptr;
    check(th_fetch(client.get(), &fc, shard.views.data(), shard.views.size(), nullptr, &replica), "fetching");
    double done = wall_now();
    emit(str("{\"role\":\"reader\",\"ready\":", fixed(ready), ",\"done\":", fixed(done), ",\"bytes\":", o.payload.bytes,
             "}"));
    serve_until_quit([&] { return o.payload.check(shard.buffer.data()); });
    check(th_replica_release(replica), "releasing");
    return 0;
}

int run_direct_target(const Options &o) {
    th_bench::RawTarget target;
    PageBuffer buffer(o.payload.bytes);
    o.payload.fill(buffer.data());
    auto rkey = target.expose(buffer);
    auto address = target.address();
    {
        std::string tmp = o.info + ".tmp";
        std::ofstream out(tmp);
        out << th_bench::to_hex(address.data(), address.size()) << "\n"
            << reinterpret_cast<uintptr_t>(buffer.data()) << "\n"
            << th_bench::to_hex(rkey.data(), rkey.size()) << "\n";
        out.close();
        if (!out || std::rename(tmp.c_str(), o.info.c_str()) != 0) fail("cannot write ", o.info);
    }
    wait_for_start();
    serve_until_quit([] { return true; });
    return 0;
}

int run_direct_reader(const Options &o) {
    std::ifstream in(o.info);
    std::string address, remote, rkey;
    if (!(in >> address >> remote >> rkey)) fail("cannot read the target's address from ", o.info);
    th_bench::RawReader reader;
    reader.connect(th_bench::from_hex(address));
    PageBuffer buffer(o.payload.bytes);
    buffer.clear();
    reader.bind(th_bench::to_u64(remote), th_bench::from_hex(rkey), buffer);
    double t0 = wait_for_start();
    sleep_until(t0 + o.ready_offset);
    double ready = wall_now();
    auto deadline = th_bench::Clock::now() + std::chrono::milliseconds(deadline_ms(o.payload.bytes));
    reader.read_all(o.chunk_bytes, o.inflight, deadline, /*wait_on_events=*/true);
    double done = wall_now();
    emit(str("{\"role\":\"direct-reader\",\"ready\":", fixed(ready), ",\"done\":", fixed(done), ",\"bytes\":",
             o.payload.bytes, "}"));
    serve_until_quit([&] { return o.payload.check(buffer.data()); });
    return 0;
}

}  // namespace

int main(int argc, char **argv) {
    // The transport settings libtensorhub picks for tcp, for the raw baseline
    // too (see perf/fetch_bench.cpp).
    setenv("UCX_TCP_TX_SEG_SIZE", "64K", 0);
    setenv("UCX_TCP_RX_SEG_SIZE", "256K", 0);
    try {
        th_tools::Args args(argc, argv, {"keep"});
        auto bad = args.unknown({"role", "bytes", "tensors", "chunk-kb", "inflight", "ready-offset", "server", "model",
                                 "labels", "info", "mutation-wait-ms", "keep"});
        if (!bad.empty()) fail("unknown option --", bad[0]);
        Options o;
        o.payload = payload_option(args);
        o.chunk_bytes = args.get_u64("chunk-kb", o.chunk_bytes >> 10) << 10;
        o.inflight = static_cast<unsigned>(args.get_u64("inflight", o.inflight));
        o.ready_offset = args.get_double("ready-offset", 0);
        o.server = args.get("server");
        o.model = args.get("model", "cluster-bench");
        o.labels = args.get("labels");
        o.info = args.get("info");
        o.mutation_wait_ms = static_cast<uint32_t>(args.get_u64("mutation-wait-ms", 0));
        o.keep = args.has("keep");
        std::string role = args.get("role");
        if (role == "trainer") return run_trainer(o);
        if (role == "reader") return run_reader(o);
        if (role == "direct-target") return run_direct_target(o);
        if (role == "direct-reader") return run_direct_reader(o);
        fail("unknown --role '", role, "' (trainer, reader, direct-target, direct-reader)");
    } catch (const std::exception &e) {
        std::fprintf(stderr, "tensorhub-cluster-node: %s\n", e.what());
        return 1;
    }
}
