// A tensorhub worker process for the integration tests, using only the public
// API. Prints one line per event on stdout ("ready ...", "ok ...", "error ...")
// and keeps serving until SIGTERM.
//
//   th_test_worker publish --server URL --name N --model M --version V
//                  --shards S --shard-kb K [--tensors T] [--labels L]
//   th_test_worker fetch --server URL --name N --model M [--version V|latest]
//                  [--shards 0,1] [--shard-kb K --tensors T] [--no-serve] [--exit]
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

#include "args.hpp"
#include "pattern.hpp"
#include "tensorhub/tensorhub.h"

namespace {

volatile sig_atomic_t g_stop = 0;
void on_term(int) { g_stop = 1; }

[[noreturn]] void die(const std::string &what) {
    std::printf("error %s: %s (%s)\n", what.c_str(), th_status_str(TH_ERR_INTERNAL), th_last_error());
    std::fflush(stdout);
    std::exit(1);
}

void check(th_status st, const std::string &what) {
    if (st != TH_OK) {
        std::printf("error %s: %s: %s\n", what.c_str(), th_status_str(st), th_last_error());
        std::fflush(stdout);
        std::exit(1);
    }
}

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
            v.ndim = 2;
            v.shape[0] = 2;
            v.shape[1] = static_cast<int64_t>(per / 4);
            v.data = data[t].data();
            v.nbytes = per;
            views.push_back(v);
        }
    }
};

std::vector<uint32_t> parse_list(const std::string &s) {
    std::vector<uint32_t> out;
    size_t pos = 0;
    while (pos < s.size()) {
        size_t c = s.find(',', pos);
        if (c == std::string::npos) c = s.size();
        out.push_back(static_cast<uint32_t>(std::stoul(s.substr(pos, c - pos))));
        pos = c + 1;
    }
    return out;
}

}  // namespace

int main(int argc, char **argv) {
    std::signal(SIGTERM, on_term);
    std::signal(SIGINT, on_term);
    th_tools::Args args(argc, argv, {"no-serve", "exit"});
    if (args.positional().empty()) die("usage");
    std::string role = args.positional()[0];
    std::string url = args.get("server"), name = args.get("name", role), model = args.get("model", "m");
    std::string labels = args.get("labels", "host=" + name);
    uint64_t shard_bytes = args.get_u64("shard-kb", 1024) << 10;
    int tensors = static_cast<int>(args.get_u64("tensors", 4));

    th_client_config cc;
    th_client_config_init(&cc);
    cc.server_url = url.c_str();
    cc.worker_name = name.c_str();
    cc.labels = labels.c_str();
    cc.timeout_ms = static_cast<uint32_t>(args.get_u64("timeout-ms", 10000));
    th_client *c = nullptr;
    check(th_client_create(&c, &cc), "connect");

    std::vector<Shard> shards;
    std::vector<th_replica *> held;
    if (role == "publish") {
        uint64_t version = args.get_u64("version", 1);
        uint32_t n = static_cast<uint32_t>(args.get_u64("shards", 1));
        for (uint32_t s = 0; s < n; ++s) shards.emplace_back(shard_bytes, tensors);
        for (uint32_t s = 0; s < n; ++s) {
            for (int t = 0; t < tensors; ++t)
                th_tools::fill_pattern(shards[s].data[t].data(), shards[s].data[t].size(), th_tools::pattern_seed(version, s, t));
            th_publish_config pc;
            th_publish_config_init(&pc);
            pc.model = model.c_str();
            pc.version = version;
            pc.shard = s;
            pc.num_shards = n;
            pc.chunk_bytes = args.get_u64("chunk-kb", 256) << 10;
            th_replica *r = nullptr;
            check(th_publish(c, &pc, shards[s].views.data(), shards[s].views.size(), &r), "publish");
            held.push_back(r);
        }
        std::printf("ready worker=%llu version=%llu\n", (unsigned long long)th_client_worker_id(c), (unsigned long long)version);
    } else if (role == "fetch") {
        std::vector<uint32_t> which = parse_list(args.get("shards", "0"));
        std::string v = args.get("version", "latest");
        uint64_t version = TH_LATEST;
        if (v != "latest") version = std::stoull(v);
        // A rollout group resolves once; every shard is fetched at that version.
        check(th_resolve(c, model.c_str(), version, &version), "resolve");
        for (uint32_t s : which) {
            shards.emplace_back(shard_bytes, tensors);
            Shard &sh = shards.back();
            th_fetch_config fc;
            th_fetch_config_init(&fc);
            fc.model = model.c_str();
            fc.version = version;
            fc.shard = s;
            uint64_t got = 0;
            th_replica *r = nullptr;
            check(th_fetch(c, &fc, sh.views.data(), sh.views.size(), &got, args.has("no-serve") ? nullptr : &r), "fetch");
            if (got != version) die("fetched another version");
            for (int t = 0; t < tensors; ++t) {
                size_t bad = th_tools::check_pattern(sh.data[t].data(), sh.data[t].size(), th_tools::pattern_seed(got, s, t));
                if (bad != sh.data[t].size()) {
                    std::printf("corrupt shard=%u tensor=%d byte=%zu\n", s, t, bad);
                    std::fflush(stdout);
                    return 3;
                }
            }
            if (r) held.push_back(r);
        }
        std::printf("ok worker=%llu version=%llu\n", (unsigned long long)th_client_worker_id(c), (unsigned long long)version);
    } else {
        die("unknown role " + role);
    }
    std::fflush(stdout);
    if (!args.has("exit"))
        while (!g_stop) pause();
    for (th_replica *r : held) th_replica_release(r);
    th_client_destroy(c);
    return 0;
}
