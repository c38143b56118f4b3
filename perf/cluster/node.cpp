// tensorhub-cluster-node: one emulated host's program in the cluster benchmark
// (perf/cluster/cluster.py runs it inside the host's network namespace).
// Speaks the line protocol of node_io.hpp.
//
// tensorhub roles (public API only):
//   --role trainer   publishes S bytes at T0, then at once (or after
//                    --step-s, the next step's forward and backward, which
//                    leave the weights alone) begins to mutate its buffers
//                    (th_replica_begin_mutation; the retention policy spills
//                    the version into an owned copy that keeps serving, made
//                    right after the publish with --spill-ahead) and
//                    overwrites them. Reports its stall: the publish and the
//                    begin-mutation, what it waits for in tensorhub calls. Before T0 it goes through the
//                    same steps for the versions below Payload::kVersion, as
//                    a training loop has by then: the memory for owned
//                    copies is what a running trainer has.
//   --role reader    at T0 + --ready-offset waits for the version, fetches it
//                    and serves it on (pipelined replication).
// With --versions K (the prefetch scenario) the trainer publishes the i-th
// timed version (Payload::kVersion + i) at T0 + i * --interval-s, and a
// reader, having fetched the first, uses
// each version until --use-s after the next one is due, then wants that one:
// it waits for it and fetches it into its buffers (plain), or, with
// --prefetch, a thread has fetched it into a spare buffer set meanwhile and
// the reader swaps the sets. Each reader line says when it wanted a version
// (ready) and when it held it (done).
// trainer-direct baseline (plain UCX, what a point-to-point setup does):
//   --role direct-target  exposes the S bytes; writes its UCX address and
//                         rkey to --info FILE before it is armed
//   --role direct-reader  connects to it before T0; at T0 + --ready-offset
//                         GETs the whole buffer from it
//
// Common options: --bytes S --tensors T (default 4) --chunk-kb C --inflight I
// --ready-offset SECONDS. tensorhub: --server URL --model NAME --labels L
// --mutation-wait-ms MS (trainer), --keep (the trainer does not mutate),
// --versions K --interval-s G (trainer and reader), --use-s U --prefetch (reader).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
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
    double step_s = 0;  // the trainer's work between publish and mutation
    bool spill_ahead = false;
    uint64_t versions = 1;
    double interval_s = 0;  // between the trainer's versions
    double use_s = 0;       // a reader uses a version this long after the next one is due
    bool prefetch = false;  // the reader fetches the next version into spare buffers meanwhile
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
            views.push_back(th_support::host_tensor(names[t].c_str(), TH_DTYPE_FLOAT32, buffer.data() + t * p.piece(), p.piece()));
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
    cfg.spill_ahead = o.spill_ahead ? 1 : 0;
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
        th_replica *r = nullptr;
        check(th_publish(client.get(), &pc, shard.views.data(), shard.views.size(), &r), "publishing");
        return r;
    };
    // Earlier steps of the loop, untimed; readers wait for the timed versions.
    for (uint64_t v = 1; v < Payload::kVersion; ++v) {
        std::memset(shard.buffer.data(), static_cast<int>(v), shard.buffer.size());
        th_replica *r = publish(v);
        if (!o.keep) check(th_replica_begin_mutation(r), "beginning the mutation of an earlier version");
        check(th_replica_release(r), "releasing an earlier version");
    }
    o.payload.fill(shard.buffer.data());
    double t0 = wait_for_start();
    th_replica *replica = nullptr;
    for (uint64_t i = 0; i < o.versions; ++i) {
        uint64_t version = Payload::kVersion + i;
        sleep_until(t0 + double(i) * o.interval_s);
        if (i > 0) {
            // The optimizer step that makes this version: the previous one is
            // given up first (it was already, right after its publish, unless --keep).
            if (o.keep) check(th_replica_begin_mutation(replica), "beginning the mutation");
            check(th_replica_release(replica), "releasing");
            o.payload.fill(shard.buffer.data(), version);
        }
        double start = wall_now();
        replica = publish(version);
        double published = wall_now();
        double free_at = published;
        double stall = published - start;
        if (!o.keep) {
            sleep_until(published + o.step_s);
            double asked = wall_now();
            check(th_replica_begin_mutation(replica), "beginning the mutation");
            free_at = wall_now();
            stall += free_at - asked;
            // The optimizer step: the buffers no longer hold the version.
            std::memset(shard.buffer.data(), 0xA5, shard.buffer.size());
        }
        emit(str("{\"role\":\"trainer\",\"step\":", i + 1, ",\"version\":", version, ",\"published\":", fixed(published),
                 ",\"stall_s\":", fixed(stall), ",\"free\":", fixed(free_at), "}"));
    }
    serve_until_quit([] { return true; });
    check(th_replica_release(replica), "releasing");
    return 0;
}

// Fetches `version` into shard, serving it on through *replica. Returns the
// fetch's figures as JSON fields (",\"sources\":..."), for the reader's line.
std::string fetch_into(th_client *client, const Options &o, uint64_t version, Shard &shard, th_replica **replica) {
    th_sync_stats stats;
    th_sync_stats_init(&stats, sizeof stats);
    th_fetch_config fc;
    th_fetch_config_init(&fc, sizeof fc);
    fc.model = o.model.c_str();
    fc.version = version;
    fc.timeout_ms = deadline_ms(o.payload.bytes);
    fc.stats = &stats;
    check(th_fetch(client, &fc, shard.views.data(), shard.views.size(), nullptr, replica), "fetching");
    return str(",\"sources\":", stats.sources, ",\"replans\":", stats.replans, ",\"failed_sources\":",
               stats.failed_sources, ",\"from_publisher\":", stats.bytes_from_publisher);
}

int run_reader(const Options &o) {
    ClientPtr client = connect(o, "reader-" + host_name() + "-" + std::to_string(getpid()));
    Shard live(o.payload);
    std::unique_ptr<Shard> spare;
    if (o.prefetch && o.versions > 1) spare = std::make_unique<Shard>(o.payload);
    double t0 = wait_for_start();
    sleep_until(t0 + o.ready_offset);
    double ready = wall_now();
    uint32_t limit = deadline_ms(o.payload.bytes);
    uint64_t version = 0;
    check(th_wait_for_version(client.get(), o.model.c_str(), Payload::kVersion - 1, limit, &version),
          "waiting for the version");
    th_replica *replica = nullptr, *spare_replica = nullptr;
    std::string figures = fetch_into(client.get(), o, version, live, &replica);
    double done = wall_now();
    emit(str("{\"role\":\"reader\",\"step\":", version - Payload::kVersion + 1, ",\"version\":", version, ",\"ready\":", fixed(ready), ",\"done\":", fixed(done),
             ",\"bytes\":", o.payload.bytes, figures, "}"));
    Shard *held = &live, *other = spare.get();
    const uint64_t last = Payload::kVersion + o.versions - 1;
    for (uint64_t next = version + 1; next <= last; ++next) {
        double want_at = t0 + double(next - Payload::kVersion) * o.interval_s + o.use_s;
        double fetched = 0;
        if (other != nullptr) {
            // While `held` is in use and served, the next version lands in the
            // other set; its previous version is given up first.
            std::string error;
            std::thread background([&] {
                try {
                    uint64_t v = 0;
                    check(th_wait_for_version(client.get(), o.model.c_str(), next - 1, limit, &v), "waiting for the version");
                    if (spare_replica) check(th_replica_release(spare_replica), "releasing");
                    spare_replica = nullptr;
                    fetch_into(client.get(), o, next, *other, &spare_replica);
                    fetched = wall_now();
                } catch (const std::exception &e) {
                    error = e.what();
                }
            });
            sleep_until(want_at);
            ready = wall_now();
            background.join();
            if (!error.empty()) fail(error);
            std::swap(held, other);  // the swap: the reader's stall
            std::swap(replica, spare_replica);
            done = wall_now();
        } else {
            sleep_until(want_at);
            ready = wall_now();
            check(th_wait_for_version(client.get(), o.model.c_str(), next - 1, limit, &version), "waiting for the version");
            check(th_replica_release(replica), "releasing");
            replica = nullptr;
            fetch_into(client.get(), o, next, *held, &replica);
            done = wall_now();
        }
        emit(str("{\"role\":\"reader\",\"step\":", next - Payload::kVersion + 1, ",\"version\":", next, ",\"ready\":", fixed(ready), ",\"done\":", fixed(done),
                 ",\"fetched\":", fixed(fetched), ",\"bytes\":", o.payload.bytes, "}"));
    }
    serve_until_quit([&] { return o.payload.check(held->buffer.data(), last); });
    if (spare_replica) check(th_replica_release(spare_replica), "releasing");
    check(th_replica_release(replica), "releasing");
    return 0;
}

int run_direct_target(const Options &o) {
    th_bench::RawTarget target;
    th_bench::Buffer buffer(o.payload.bytes, th_bench::Memory::Host);
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
    th_bench::Buffer buffer(o.payload.bytes, th_bench::Memory::Host);
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
        th_support::Args args(argc, argv, {"keep", "prefetch", "spill-ahead"});
        auto bad = args.unknown({"role", "bytes", "tensors", "chunk-kb", "inflight", "ready-offset", "server", "model",
                                 "labels", "info", "mutation-wait-ms", "keep", "versions", "interval-s", "use-s",
                                 "prefetch", "step-s", "spill-ahead"});
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
        o.versions = std::max<uint64_t>(1, args.get_u64("versions", 1));
        o.interval_s = args.get_double("interval-s", 0);
        o.use_s = args.get_double("use-s", 0);
        o.prefetch = args.has("prefetch");
        o.step_s = args.get_double("step-s", 0);
        o.spill_ahead = args.has("spill-ahead");
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
