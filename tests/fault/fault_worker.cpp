// th_fault_worker: the publish-loop and fetch-loop roles of
// tests/integration/worker.cpp, fixed for what the mutation fault kind needs:
//  - that worker's publish-loop frees its buffer sets when the role's block
//    ends while the replicas of the last two versions stay published, so a
//    reader arriving after the loop makes it serve freed memory; here the
//    buffers live as long as the process;
//  - its fetch-loop counts a round whose fetch missed as a round; here the
//    shard fetches verified and the misses are counted apart.
//
//   th_fault_worker publish-loop --server URL --name N --model M --shards S
//       --versions V --delay-ms D --shard-kb K --tensors T --chunk-kb C
//   th_fault_worker fetch-loop --server URL --name N --model M --shards S
//       --shard-kb K --tensors T --for-ms F
//   both: [--timeout-ms T] [--heartbeat-ms H] [--chunk-timeout-ms C] [--labels L]
// publish-loop publishes versions 1..V shard by shard, D ms apart, from two
// buffer sets (version v lives in set v % 2, rewritten only after the
// replicas of v - 2 are released), prints "ready published=V", serves until
// SIGTERM, then releases everything.
// fetch-loop resolves LATEST once per round and fetches every shard of that
// version (a rollout group never mixes versions), verifying every byte, for
// F ms; prints "ok fetched=N missed=M versions=K" or, on a wrong byte,
// "mixed version=V shard=S tensor=T byte=B". A version dropped meanwhile
// (not found, no holder) is an honest miss.
// Failures print "error <what>: <status>: <message>".
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "args.hpp"
#include "pattern.hpp"
#include "tensorhub/tensorhub.h"

namespace {

volatile sig_atomic_t g_stop = 0;
void on_term(int) { g_stop = 1; }

void check(th_status st, const std::string &what) {
    if (st == TH_OK) return;
    std::printf("error %s: %s: %s\n", what.c_str(), th_status_str(st), th_last_error());
    std::fflush(stdout);
    std::exit(1);
}

// One shard's buffers: bfloat16 tensors "w0".. sized as th_test_worker sizes
// them, so that th_test_worker readers agree on the layout.
struct Shard {
    std::vector<std::vector<uint8_t>> data;
    std::vector<std::string> names;
    std::vector<th_tensor> views;
    Shard(uint64_t bytes, int tensors) {
        uint64_t per = bytes / tensors / 2 * 2;
        for (int t = 0; t < tensors; ++t) {
            data.emplace_back(per);
            names.push_back("w" + std::to_string(t));
        }
        for (int t = 0; t < tensors; ++t) {
            th_tensor v{};
            v.name = names[t].c_str();
            v.dtype = TH_DTYPE_BFLOAT16;
            v.ndim = 1;
            v.shape[0] = static_cast<int64_t>(per / 2);
            v.data = data[t].data();
            v.nbytes = per;
            views.push_back(v);
        }
    }
    void fill(uint64_t version, uint32_t shard) {
        for (size_t t = 0; t < data.size(); ++t)
            th_tools::fill_pattern(data[t].data(), data[t].size(), th_tools::pattern_seed(version, shard, t));
    }
};

th_client *connect(const th_tools::Args &args, const std::string &name, const std::string &labels) {
    th_client_config cc;
    th_client_config_init(&cc, sizeof cc);
    std::string url = args.get("server");
    cc.server_url = url.c_str();
    cc.worker_name = name.c_str();
    cc.labels = labels.c_str();
    cc.timeout_ms = static_cast<uint32_t>(args.get_u64("timeout-ms", 10000));
    cc.heartbeat_ms = static_cast<uint32_t>(args.get_u64("heartbeat-ms", 1000));
    cc.chunk_timeout_ms = static_cast<uint32_t>(args.get_u64("chunk-timeout-ms", 5000));
    th_client *c = nullptr;
    check(th_client_create(&c, &cc), "connect");
    return c;
}

th_replica *publish(th_client *c, const std::string &model, uint64_t version, uint32_t shard, uint32_t shards,
                    uint64_t chunk_bytes, Shard &buffers) {
    th_publish_config pc;
    th_publish_config_init(&pc, sizeof pc);
    pc.model = model.c_str();
    pc.version = version;
    pc.shard = shard;
    pc.num_shards = shards;
    pc.chunk_bytes = chunk_bytes;
    th_replica *r = nullptr;
    check(th_publish(c, &pc, buffers.views.data(), buffers.views.size(), &r), "publish");
    return r;
}

int publish_loop(const th_tools::Args &args, th_client *c) {
    const std::string model = args.get("model", "m");
    const uint32_t shards = static_cast<uint32_t>(args.get_u64("shards", 1));
    const uint64_t versions = args.get_u64("versions", 10), delay_ms = args.get_u64("delay-ms", 20);
    const uint64_t bytes = args.get_u64("shard-kb", 1024) << 10, chunk = args.get_u64("chunk-kb", 64) << 10;
    const int tensors = static_cast<int>(args.get_u64("tensors", 4));

    // Two buffer sets, alive until the replicas of them are released below.
    // unique_ptr keeps each Shard (and the views into it) at a fixed address.
    std::vector<std::unique_ptr<Shard>> sets[2];
    for (auto &set : sets)
        for (uint32_t s = 0; s < shards; ++s) set.push_back(std::make_unique<Shard>(bytes, tensors));
    std::vector<th_replica *> live[2];  // the replicas of the version each set holds

    for (uint64_t v = 1; v <= versions && !g_stop; ++v) {
        auto &set = sets[v % 2];
        for (th_replica *r : live[v % 2]) check(th_replica_release(r), "release");
        live[v % 2].clear();
        for (uint32_t s = 0; s < shards; ++s) {
            set[s]->fill(v, s);
            live[v % 2].push_back(publish(c, model, v, s, shards, chunk, *set[s]));
            usleep(static_cast<useconds_t>(delay_ms * 1000));
        }
    }
    std::printf("ready published=%llu\n", static_cast<unsigned long long>(versions));
    std::fflush(stdout);
    while (!g_stop) pause();
    for (auto &rs : live)
        for (th_replica *r : rs) th_replica_release(r);
    return 0;
}

// Fetches shard s of `version` into `buffers` and checks every byte.
// Returns false on an honest miss; exits on any other failure.
bool fetch_and_verify(th_client *c, const std::string &model, uint64_t version, uint32_t s, Shard &buffers) {
    th_fetch_config fc;
    th_fetch_config_init(&fc, sizeof fc);
    fc.model = model.c_str();
    fc.version = version;
    fc.shard = s;
    uint64_t got = 0;
    th_status st = th_fetch(c, &fc, buffers.views.data(), buffers.views.size(), &got, nullptr);
    if (st == TH_ERR_NOT_FOUND || st == TH_ERR_UNAVAILABLE) return false;
    check(st, "fetch");
    for (size_t t = 0; t < buffers.data.size(); ++t) {
        size_t bad = th_tools::check_pattern(buffers.data[t].data(), buffers.data[t].size(),
                                             th_tools::pattern_seed(version, s, t));
        if (got != version || bad != buffers.data[t].size()) {
            std::printf("mixed version=%llu got=%llu shard=%u tensor=%zu byte=%zu\n",
                        static_cast<unsigned long long>(version), static_cast<unsigned long long>(got), s, t, bad);
            std::fflush(stdout);
            std::exit(3);
        }
    }
    return true;
}

int fetch_loop(const th_tools::Args &args, th_client *c) {
    const std::string model = args.get("model", "m");
    const uint32_t shards = static_cast<uint32_t>(args.get_u64("shards", 1));
    const uint64_t bytes = args.get_u64("shard-kb", 1024) << 10;
    const int tensors = static_cast<int>(args.get_u64("tensors", 4));
    std::vector<std::unique_ptr<Shard>> buffers;
    for (uint32_t s = 0; s < shards; ++s) buffers.push_back(std::make_unique<Shard>(bytes, tensors));
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(args.get_u64("for-ms", 2000));
    uint64_t fetched = 0, missed = 0, distinct = 0, last = 0;
    while (std::chrono::steady_clock::now() < end && !g_stop) {
        uint64_t version = 0;
        if (th_resolve(c, model.c_str(), TH_LATEST, &version) != TH_OK) {
            usleep(2000);
            continue;
        }
        for (uint32_t s = 0; s < shards; ++s) {
            if (!fetch_and_verify(c, model, version, s, *buffers[s])) {
                missed++;
                break;
            }
            fetched++;
        }
        distinct += version != last;
        last = version;
    }
    std::printf("ok fetched=%llu missed=%llu versions=%llu\n", static_cast<unsigned long long>(fetched),
                static_cast<unsigned long long>(missed), static_cast<unsigned long long>(distinct));
    std::fflush(stdout);
    return 0;
}

}  // namespace

int main(int argc, char **argv) {
    std::signal(SIGTERM, on_term);
    std::signal(SIGINT, on_term);
    th_tools::Args args(argc, argv);
    const std::string role = args.positional().empty() ? "" : args.positional()[0];
    if (role != "publish-loop" && role != "fetch-loop") {
        std::printf("error usage: th_fault_worker publish-loop|fetch-loop --server URL ...\n");
        return 2;
    }
    const std::string name = args.get("name", role);
    th_client *c = connect(args, name, args.get("labels", "host=" + name));
    int rc = role == "publish-loop" ? publish_loop(args, c) : fetch_loop(args, c);
    th_client_destroy(c);
    return rc;
}
