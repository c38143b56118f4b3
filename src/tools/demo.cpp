// tensorhub-demo: a local cluster on one machine. An embedded metadata server,
// one trainer process publishing several versions of a synthetic 2-shard model,
// and N rollout processes fetching every version from whoever holds it and
// serving it on. Prints, per version, who read from whom, seconds and GB/s.
//
//   tensorhub-demo [--readers 4] [--versions 3] [--shard-mb 128] [--shards 2]
//                  [--tensors 8] [--chunk-kb 4096]
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "args.hpp"
#include "host_shard.hpp"
#include "tensorhub/tensorhub.h"

extern char **environ;

using Clock = std::chrono::steady_clock;
using th_support::Args;
using th_support::human_bytes;

namespace {

struct Options {
    int readers = 4;
    int versions = 3;
    uint64_t shard_bytes = 128ull << 20;
    int shards = 2;
    int tensors = 8;
    uint64_t chunk_bytes = TH_DEFAULT_CHUNK_BYTES;
};

[[noreturn]] void die(const std::string &what) {
    std::fprintf(stderr, "tensorhub-demo: %s\n", what.c_str());
    std::exit(1);
}

void check(th_status st, const char *what) {
    if (st != TH_OK) die(std::string(what) + ": " + th_status_str(st) + ": " + th_last_error());
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// One shard's buffers: `tensors` float32 tensors of equal size.
struct ShardBuffers : th_support::HostShard {
    explicit ShardBuffers(const Options &o)
        : HostShard(o.tensors, o.shard_bytes / o.tensors, TH_DTYPE_FLOAT32, "layers.", ".weight") {}
};

th_client *connect(const std::string &url, const std::string &name) {
    th_client_config cfg;
    th_client_config_init(&cfg, sizeof cfg);
    cfg.server_url = url.c_str();
    cfg.worker_name = name.c_str();
    std::string labels = "host=" + name;
    cfg.labels = labels.c_str();
    th_client *c = nullptr;
    check(th_client_create(&c, &cfg), "connecting to the server");
    return c;
}

nlohmann::json status(th_client *c) {
    char *out = nullptr;
    check(th_status_json(c, &out), "status");
    auto j = nlohmann::json::parse(out);
    th_free(out);
    return j;
}

// True when every shard of version v has a complete replica on `holders` workers.
bool fully_replicated(const nlohmann::json &s, uint64_t v, size_t holders) {
    for (const auto &m : s["models"])
        for (const auto &ver : m["versions"]) {
            if (ver["version"].get<uint64_t>() != v) continue;
            for (const auto &sh : ver["shards"]) {
                size_t complete = 0;
                for (const auto &r : sh["replicas"]) complete += r["complete"].get<bool>();
                if (complete < holders) return false;
            }
            return true;
        }
    return false;
}

int run_trainer(const std::string &url, const Options &o) {
    th_client *c = connect(url, "trainer");
    // Two buffer sets: version v is published from set v % 2, so the buffers
    // are overwritten only after the version they held was released.
    std::vector<std::vector<ShardBuffers>> sets(2);
    for (auto &set : sets)
        for (int s = 0; s < o.shards; ++s) set.emplace_back(o);
    std::map<uint64_t, std::vector<th_replica *>> held;
    for (uint64_t v = 1; v <= static_cast<uint64_t>(o.versions); ++v) {
        auto &set = sets[v % 2];
        if (held.count(v - 2)) {
            for (th_replica *r : held[v - 2]) check(th_replica_release(r), "release");
            held.erase(v - 2);
        }
        for (int s = 0; s < o.shards; ++s) set[s].fill(v, static_cast<uint32_t>(s));
        auto t0 = Clock::now();
        for (int s = 0; s < o.shards; ++s) {
            th_publish_config pc;
            th_publish_config_init(&pc, sizeof pc);
            pc.model = "policy";
            pc.version = v;
            pc.shard = static_cast<uint32_t>(s);
            pc.num_shards = static_cast<uint32_t>(o.shards);
            pc.chunk_bytes = o.chunk_bytes;
            th_replica *r = nullptr;
            check(th_publish(c, &pc, set[s].views.data(), set[s].views.size(), &r), "publish");
            held[v].push_back(r);
        }
        std::printf("trainer: published version %llu (%d shards x %s) in %.3f s\n", (unsigned long long)v, o.shards,
                    human_bytes(double(set[0].bytes())).c_str(), seconds_since(t0));
        std::fflush(stdout);
        // Wait until every reader holds this version, then report the tree.
        auto deadline = Clock::now() + std::chrono::seconds(300);
        nlohmann::json s;
        while (!fully_replicated(s = status(c), v, static_cast<size_t>(o.readers) + 1)) {
            if (Clock::now() > deadline) die("readers did not all fetch version " + std::to_string(v));
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        std::map<uint64_t, std::string> names;
        for (const auto &w : s["workers"]) names[w["worker_id"].get<uint64_t>()] = w["name"].get<std::string>();
        std::printf("version %llu replication (reader <- source):\n", (unsigned long long)v);
        for (const auto &m : s["models"])
            for (const auto &ver : m["versions"])
                if (ver["version"].get<uint64_t>() == v)
                    for (const auto &r : ver["reads"])
                        std::printf("  %-10s <- %-10s shard %llu  %s\n", names[r["reader"].get<uint64_t>()].c_str(),
                                    names[r["source"].get<uint64_t>()].c_str(),
                                    (unsigned long long)r["shard"].get<uint64_t>(),
                                    human_bytes(r["bytes"].get<double>()).c_str());
        std::fflush(stdout);
    }
    for (auto &[v, rs] : held)
        for (th_replica *r : rs) th_replica_release(r);
    th_client_destroy(c);  // the readers see the trainer leave and finish
    return 0;
}

int run_reader(const std::string &url, const Options &o, int index) {
    std::string name = "reader-" + std::to_string(index);
    th_client *c = connect(url, name);
    std::vector<ShardBuffers> bufs[2];
    for (auto &b : bufs)
        for (int s = 0; s < o.shards; ++s) b.emplace_back(o);
    std::vector<th_replica *> previous;
    for (uint64_t v = 1; v <= static_cast<uint64_t>(o.versions); ++v) {
        // Wait for the version to be committed.
        auto deadline = Clock::now() + std::chrono::seconds(300);
        uint64_t latest = 0;
        while (th_resolve(c, "policy", TH_LATEST, &latest) != TH_OK || latest < v) {
            if (Clock::now() > deadline) die(name + ": version " + std::to_string(v) + " never appeared");
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        auto &set = bufs[v % 2];
        std::vector<th_replica *> now;
        auto t0 = Clock::now();
        uint64_t bytes = 0;
        for (int s = 0; s < o.shards; ++s) {
            th_fetch_config fc;
            th_fetch_config_init(&fc, sizeof fc);
            fc.model = "policy";
            fc.version = v;
            fc.shard = static_cast<uint32_t>(s);
            uint64_t got = 0;
            th_replica *r = nullptr;
            check(th_fetch(c, &fc, set[s].views.data(), set[s].views.size(), &got, &r), "fetch");
            now.push_back(r);
            bytes += set[s].bytes();
        }
        double secs = seconds_since(t0);
        for (int s = 0; s < o.shards; ++s) {
            size_t byte = 0;
            if (int t = set[s].first_wrong(v, static_cast<uint32_t>(s), &byte); t >= 0)
                die(name + ": version " + std::to_string(v) + " shard " + std::to_string(s) + " tensor " +
                    std::to_string(t) + " differs at byte " + std::to_string(byte));
        }
        std::printf("%-10s version %llu: %s in %.3f s (%.2f GB/s), verified\n", name.c_str(), (unsigned long long)v,
                    human_bytes(double(bytes)).c_str(), secs, bytes / secs / 1e9);
        std::fflush(stdout);
        for (th_replica *r : previous) check(th_replica_release(r), "release");
        previous = now;
    }
    // Keep serving until the trainer, having seen everyone hold the last
    // version, leaves.
    auto deadline = Clock::now() + std::chrono::seconds(300);
    auto trainer_present = [](const nlohmann::json &s) {
        for (const auto &w : s["workers"])
            if (w["name"] == "trainer") return true;
        return false;
    };
    while (trainer_present(status(c))) {
        if (Clock::now() > deadline) die(name + ": the trainer never finished");
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    for (th_replica *r : previous) th_replica_release(r);
    th_client_destroy(c);
    return 0;
}

pid_t spawn(const std::vector<std::string> &argv) {
    std::vector<char *> args;
    for (auto &a : argv) args.push_back(const_cast<char *>(a.c_str()));
    args.push_back(nullptr);
    pid_t pid = 0;
    if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, args.data(), environ) != 0) die("cannot start a process");
    return pid;
}

}  // namespace

int main(int argc, char **argv) {
    Options o;
    std::string role, url;
    int index = 0;
    try {
        Args args(argc, argv, {"help"});
        if (args.has("help")) {
            std::printf("usage: tensorhub-demo [--readers N] [--versions N] [--shard-mb N] [--shards N] [--tensors N] [--chunk-kb N]\n");
            return 0;
        }
        auto bad = args.unknown({"readers", "versions", "shard-mb", "shard-kb", "shards", "tensors", "chunk-kb", "role", "server", "index"});
        if (!bad.empty()) die("unknown option --" + bad[0]);
        o.readers = static_cast<int>(args.get_u64("readers", 4));
        o.versions = static_cast<int>(args.get_u64("versions", 3));
        o.shard_bytes = args.has("shard-kb") ? args.get_u64("shard-kb", 0) << 10 : args.get_u64("shard-mb", 128) << 20;
        o.shards = static_cast<int>(args.get_u64("shards", 2));
        o.tensors = static_cast<int>(args.get_u64("tensors", 8));
        o.chunk_bytes = args.get_u64("chunk-kb", TH_DEFAULT_CHUNK_BYTES >> 10) << 10;
        role = args.get("role");
        url = args.get("server");
        index = static_cast<int>(args.get_u64("index", 0));
        if (o.readers < 1 || o.versions < 1 || o.shards < 1 || o.tensors < 1 || o.shard_bytes < uint64_t(o.tensors) * 4)
            die("readers, versions, shards and tensors must be positive and the shard large enough");
    } catch (const std::exception &e) {
        die(e.what());
    }
    if (role == "trainer") return run_trainer(url, o);
    if (role == "reader") return run_reader(url, o, index);

    th_server_config sc;
    th_server_config_init(&sc, sizeof sc);
    th_server *server = nullptr;
    check(th_server_create(&server, &sc), "starting the embedded server");
    url = th_server_url(server);
    std::printf("tensorhub %s demo: embedded server at %s, 1 trainer, %d readers, %d versions of %d shards x %s\n",
                th_version(), url.c_str(), o.readers, o.versions, o.shards, human_bytes(double(o.shard_bytes)).c_str());
    std::fflush(stdout);
    std::vector<std::string> common = {"tensorhub-demo", "--server", url,
                                       "--readers", std::to_string(o.readers), "--versions", std::to_string(o.versions),
                                       "--shard-kb", std::to_string(o.shard_bytes >> 10), "--shards", std::to_string(o.shards),
                                       "--tensors", std::to_string(o.tensors), "--chunk-kb", std::to_string(o.chunk_bytes >> 10)};
    auto with = [&](std::vector<std::string> extra) {
        auto v = common;
        v.insert(v.end(), extra.begin(), extra.end());
        return v;
    };
    std::vector<pid_t> procs = {spawn(with({"--role", "trainer"}))};
    for (int i = 1; i <= o.readers; ++i) procs.push_back(spawn(with({"--role", "reader", "--index", std::to_string(i)})));
    int failures = 0;
    for (pid_t p : procs) {
        int st = 0;
        waitpid(p, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            // One failed: stop the others rather than let them wait.
            failures++;
            for (pid_t q : procs) kill(q, SIGTERM);
        }
    }
    th_server_destroy(server);
    if (failures) {
        std::fprintf(stderr, "tensorhub-demo: %d process(es) failed\n", failures);
        return 1;
    }
    std::printf("demo finished: every reader verified every version\n");
    return 0;
}
