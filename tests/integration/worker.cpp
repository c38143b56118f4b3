// A tensorhub worker process for the integration tests, using only the public
// API. Prints one line per event on stdout ("ready ...", "ok ...", "error ...")
// and keeps serving until SIGTERM.
//
//   th_test_worker publish --server URL --name N --model M --version V
//                  --shards S --shard-kb K [--tensors T] [--labels L] [--mutate]
//                  --mutate: then begin a mutation of each shard and overwrite it
//   th_test_worker fetch --server URL --name N --model M [--version V|latest]
//                  [--shards 0,1] [--shard-kb K --tensors T] [--no-serve] [--exit]
//                  [--verify off|sample|all]
//                  latest: one shard is fetched as TH_LATEST (the library follows
//                  a version that moves on meanwhile); several at the version
//                  resolved once, as a rollout group does
//                  fetch prints "ok worker=W version=V bytes=B one_sided=O waited=A kept=K replans=R"
//                  (O: of the B bytes fetched, those read one-sided);
//                  publish and fetch hold what they have until SIGTERM;
//                  SIGUSR1 flips a byte of the first shard held (a stray write)
//   th_test_worker wait --server URL --model M --newer-than V [--timeout-ms T]
//   th_test_worker publish-loop ... --versions N --shards S --delay-ms D [--for-ms T]
//                  publishes versions 1..N, shard by shard with a delay between
//                  (and stops after T ms if that comes first)
//   th_test_worker fetch-loop ... --shards S --for-ms T [--serve] [--verify off|sample|all]
//                  resolves LATEST once per round and fetches every shard of
//                  that version; prints "ok rounds=R versions=K fetched=F";
//                  --serve: each round's shards serve others until the round
//                  after next (two buffer sets, as publish-loop); then
//                  SIGUSR1 flips a byte of what it serves, behind the
//                  library's back (a stray write), and counts it in
//                  "strays=N"
// The environment's TENSORHUB_FAULT_* hooks apply (see src/common/faults.hpp).
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <execinfo.h>
#include <unistd.h>

#include "args.hpp"
#include "host_shard.hpp"
#include "tensorhub/tensorhub.h"

namespace {

volatile sig_atomic_t g_stop = 0;
void on_term(int) { g_stop = 1; }
volatile sig_atomic_t g_stray = 0;
void on_usr1(int) { g_stray = 1; }

// A crash writes its signal and a backtrace into the worker's log (stderr),
// then ends the process with the same signal, so that the fault driver's
// report says where it happened. (One crash in CI left an empty log.)
void on_fatal(int sig) {
    char line[64] = "th_test_worker: fatal signal ";
    size_t n = std::strlen(line);
    if (sig >= 10) line[n++] = static_cast<char>('0' + sig / 10);
    line[n++] = static_cast<char>('0' + sig % 10);
    std::memcpy(line + n, ", backtrace:\n", 13);
    (void)!write(2, line, n + 13);
    void *frames[64];
    backtrace_symbols_fd(frames, backtrace(frames, 64), 2);
    std::signal(sig, SIG_DFL);
    raise(sig);
}

// After th_client_create: UCX installs handlers of its own when it starts,
// and these replace them. The main thread's handler runs on a stack of its
// own, so that a stack overflow there is reported too.
void install_crash_handlers() {
    void *warm[1];
    backtrace(warm, 1);  // loads what backtrace needs now, not in the handler
    static char alt[1 << 16];
    stack_t ss{};
    ss.ss_sp = alt;
    ss.ss_size = sizeof alt;
    sigaltstack(&ss, nullptr);
    struct sigaction sa{};
    sa.sa_handler = on_fatal;
    sa.sa_flags = SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) sigaction(sig, &sa, nullptr);
}

// A worker that gives up leaves at once: its client (and the threads UCX
// started for it) may still be live, and exit() would run the libraries'
// static destructors under them (ThreadSanitizer saw UCX's destroy a lock a
// finished, unjoined thread of the client had taken). The tests read only
// its output line and its exit status.
[[noreturn]] void leave(int status) {
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(status);
}

[[noreturn]] void die(const std::string &what) {
    std::printf("error %s: %s (%s)\n", what.c_str(), th_status_str(TH_ERR_INTERNAL), th_last_error());
    leave(1);
}

void check(th_status st, const std::string &what) {
    if (st != TH_OK) {
        std::printf("error %s: %s: %s\n", what.c_str(), th_status_str(st), th_last_error());
        leave(1);
    }
}

// A shard as the tests lay it out: bfloat16 tensors "w0".."w{n-1}".
struct Shard : th_support::HostShard {
    Shard(uint64_t bytes, int tensors) : HostShard(tensors, bytes / tensors, TH_DTYPE_BFLOAT16) {}
};

// Publishes one shard of `version` from its buffers; exits on failure.
th_replica *publish_shard(th_client *c, const std::string &model, uint64_t version, uint32_t shard, uint32_t num_shards,
                          uint64_t chunk_bytes, Shard &buffers) {
    th_publish_config pc;
    th_publish_config_init(&pc, sizeof pc);
    pc.model = model.c_str();
    pc.version = version;
    pc.shard = shard;
    pc.num_shards = num_shards;
    pc.chunk_bytes = chunk_bytes;
    th_replica *r = nullptr;
    check(th_publish(c, &pc, buffers.views.data(), buffers.views.size(), &r), "publish");
    return r;
}

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

// The k-th stray write into a shard, behind the library's back: one byte of
// one tensor flipped, a different place each time.
void stray_write(th_support::HostShard &shard, uint64_t k) {
    auto &bytes = shard.data[k % shard.data.size()];
    bytes[(k * 7919) % bytes.size()] ^= 0x5a;
}

th_verify parse_verify(const std::string &mode) {
    if (mode == "off") return TH_VERIFY_OFF;
    if (mode == "sample") return TH_VERIFY_SAMPLE;
    if (mode == "all") return TH_VERIFY_ALL;
    die("--verify must be off, sample or all");
}

}  // namespace

int main(int argc, char **argv) {
    std::signal(SIGTERM, on_term);
    std::signal(SIGINT, on_term);
    std::signal(SIGUSR1, on_usr1);
    th_support::Args args(argc, argv, {"no-serve", "exit", "mutate", "serve"});
    if (args.positional().empty()) die("usage");
    std::string role = args.positional()[0];
    std::string url = args.get("server"), name = args.get("name", role), model = args.get("model", "m");
    std::string labels = args.get("labels", "host=" + name);
    uint64_t shard_bytes = args.get_u64("shard-kb", 1024) << 10;
    int tensors = static_cast<int>(args.get_u64("tensors", 4));
    th_verify verify = parse_verify(args.get("verify", "sample"));

    th_client_config cc;
    th_client_config_init(&cc, sizeof cc);
    cc.server_url = url.c_str();
    cc.worker_name = name.c_str();
    cc.labels = labels.c_str();
    cc.timeout_ms = static_cast<uint32_t>(args.get_u64("timeout-ms", cc.timeout_ms));
    cc.chunk_timeout_ms = static_cast<uint32_t>(args.get_u64("chunk-timeout-ms", cc.chunk_timeout_ms));
    cc.heartbeat_ms = static_cast<uint32_t>(args.get_u64("heartbeat-ms", cc.heartbeat_ms));
    cc.mutation_wait_ms = static_cast<uint32_t>(args.get_u64("mutation-wait-ms", cc.mutation_wait_ms));
    th_client *c = nullptr;
    check(th_client_create(&c, &cc), "connect");
    install_crash_handlers();

    std::vector<Shard> shards;
    std::vector<Shard> loop_sets[2];  // publish-loop's buffers; served until the end
    std::vector<th_replica *> held;
    if (role == "publish") {
        uint64_t version = args.get_u64("version", 1);
        uint32_t n = static_cast<uint32_t>(args.get_u64("shards", 1));
        for (uint32_t s = 0; s < n; ++s) shards.emplace_back(shard_bytes, tensors);
        for (uint32_t s = 0; s < n; ++s) {
            shards[s].fill(version, s);
            held.push_back(publish_shard(c, model, version, s, n, args.get_u64("chunk-kb", 256) << 10, shards[s]));
        }
        if (args.has("mutate")) {
            for (uint32_t s = 0; s < n; ++s) {
                check(th_replica_begin_mutation(held[s]), "begin_mutation");
                shards[s].fill(version + 1000, s);  // the optimizer step: the version lives on elsewhere
            }
        }
        std::printf("ready worker=%llu version=%llu\n", (unsigned long long)th_client_worker_id(c), (unsigned long long)version);
    } else if (role == "fetch") {
        std::vector<uint32_t> which = parse_list(args.get("shards", "0"));
        std::string v = args.get("version", "latest");
        uint64_t version = TH_LATEST;
        if (v != "latest") version = std::stoull(v);
        // Readers meant to start together wait for the test's signal (a file
        // appearing) once they are connected.
        if (args.has("start-file")) {
            std::printf("waiting\n");
            std::fflush(stdout);
            for (int i = 0; i < 60000 && access(args.get("start-file").c_str(), F_OK) != 0; ++i)
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        // A rollout group resolves once; every shard is fetched at that
        // version. One shard of the newest: asked for as such, so that a
        // slow start does not find the version resolved gone meanwhile.
        bool follow_latest = version == TH_LATEST && which.size() == 1;
        if (!follow_latest) check(th_resolve(c, model.c_str(), version, &version), "resolve");
        uint64_t fetched = 0, one_sided = 0, waited = 0, kept = 0, replans = 0;
        for (uint32_t s : which) {
            shards.emplace_back(shard_bytes, tensors);
            Shard &sh = shards.back();
            th_fetch_config fc;
            th_fetch_config_init(&fc, sizeof fc);
            fc.model = model.c_str();
            fc.version = version;
            fc.shard = s;
            fc.verify = verify;
            th_sync_stats stats;
            th_sync_stats_init(&stats, sizeof stats);
            fc.stats = &stats;
            uint64_t got = 0;
            th_replica *r = nullptr;
            check(th_fetch(c, &fc, sh.views.data(), sh.views.size(), &got, args.has("no-serve") ? nullptr : &r), "fetch");
            if (follow_latest) version = got;
            if (got != version) die("fetched another version");
            fetched += stats.bytes;
            one_sided += stats.bytes_one_sided;
            waited += stats.bytes_waited;
            kept += stats.bytes_kept;
            replans += stats.replans;
            size_t byte = 0;
            if (int t = sh.first_wrong(got, s, &byte); t >= 0) {
                std::printf("corrupt shard=%u tensor=%d byte=%zu\n", s, t, byte);
                std::fflush(stdout);
                return 3;
            }
            if (r) held.push_back(r);
        }
        std::printf("ok worker=%llu version=%llu bytes=%llu one_sided=%llu waited=%llu kept=%llu replans=%llu\n",
                    (unsigned long long)th_client_worker_id(c), (unsigned long long)version,
                    (unsigned long long)fetched, (unsigned long long)one_sided, (unsigned long long)waited,
                    (unsigned long long)kept, (unsigned long long)replans);
    } else if (role == "wait") {
        uint64_t got = 0;
        check(th_wait_for_version(c, model.c_str(), args.get_u64("newer-than", 0),
                                  static_cast<uint32_t>(args.get_u64("wait-ms", 10000)), &got),
              "wait");
        std::printf("ok version=%llu\n", (unsigned long long)got);
    } else if (role == "publish-loop") {
        // Two buffer sets per shard: version v lives in set v % 2, which is
        // rewritten only after the replicas of v - 2 were released.
        uint32_t n = static_cast<uint32_t>(args.get_u64("shards", 1));
        uint64_t versions = args.get_u64("versions", 10), delay = args.get_u64("delay-ms", 20);
        // Both buffer sets outlive the loop: the last versions stay published from them.
        for (auto &set : loop_sets)
            for (uint32_t s = 0; s < n; ++s) set.emplace_back(shard_bytes, tensors);
        std::vector<th_replica *> by_version[2];
        auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(args.get_u64("for-ms", UINT32_MAX));
        uint64_t published = 0;
        for (uint64_t v = 1; v <= versions && !g_stop && std::chrono::steady_clock::now() < until; ++v) {
            auto &set = loop_sets[v % 2];
            for (th_replica *r : by_version[v % 2]) check(th_replica_release(r), "release");
            by_version[v % 2].clear();
            for (uint32_t s = 0; s < n; ++s) {
                set[s].fill(v, s);
                by_version[v % 2].push_back(publish_shard(c, model, v, s, n, args.get_u64("chunk-kb", 64) << 10, set[s]));
                usleep(static_cast<useconds_t>(delay * 1000));
            }
            published = v;
        }
        std::printf("ready published=%llu\n", (unsigned long long)published);
        for (auto &rs : by_version)
            for (th_replica *r : rs) held.push_back(r);
    } else if (role == "fetch-loop") {
        uint32_t n = static_cast<uint32_t>(args.get_u64("shards", 1));
        bool serve = args.has("serve");
        for (auto &set : loop_sets)
            for (uint32_t s = 0; s < n; ++s) set.emplace_back(shard_bytes, tensors);
        std::vector<th_replica *> serving[2];  // by buffer set
        auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(args.get_u64("for-ms", 2000));
        uint64_t rounds = 0, last = 0, distinct = 0, fetched = 0, strays = 0;
        while (std::chrono::steady_clock::now() < end) {
            if (g_stray) {  // the last whole round's bytes, which it serves
                g_stray = 0;
                if (serve && rounds > 0 && !serving[(rounds + 1) % 2].empty()) {
                    stray_write(loop_sets[(rounds + 1) % 2][strays % n], strays);
                    strays++;
                }
            }
            uint64_t version = 0;
            if (th_resolve(c, model.c_str(), TH_LATEST, &version) != TH_OK) {
                usleep(2000);
                continue;
            }
            bool complete = true;
            // This round's buffers: the set whose replicas are two rounds old.
            auto &set = loop_sets[rounds % 2];
            for (th_replica *r : serving[rounds % 2]) check(th_replica_release(r), "release");
            serving[rounds % 2].clear();
            for (uint32_t s = 0; s < n && complete; ++s) {
                th_fetch_config fc;
                th_fetch_config_init(&fc, sizeof fc);
                fc.model = model.c_str();
                fc.version = version;
                fc.shard = s;
                fc.verify = verify;
                uint64_t got = 0;
                th_replica *r = nullptr;
                th_status st = th_fetch(c, &fc, set[s].views.data(), set[s].views.size(), &got, serve ? &r : nullptr);
                if (r) serving[rounds % 2].push_back(r);
                // A version the publisher already dropped is an honest miss, never a mix.
                if (st == TH_ERR_NOT_FOUND || st == TH_ERR_UNAVAILABLE) {
                    complete = false;
                    break;
                }
                check(st, "fetch");
                fetched++;
                size_t byte = 0;
                if (int t = set[s].first_wrong(version, s, &byte); t >= 0) {
                    std::printf("mixed version=%llu shard=%u tensor=%d byte=%zu\n", (unsigned long long)version, s, t, byte);
                    std::fflush(stdout);
                    return 3;
                }
            }
            if (!complete) continue;  // only whole rounds count
            rounds++;
            if (version != last) distinct++;
            last = version;
        }
        std::printf("ok rounds=%llu versions=%llu fetched=%llu strays=%llu\n", (unsigned long long)rounds,
                    (unsigned long long)distinct, (unsigned long long)fetched, (unsigned long long)strays);
        for (auto &rs : serving)
            for (th_replica *r : rs) held.push_back(r);
    } else {
        die("unknown role " + role);
    }
    std::fflush(stdout);
    // Held until SIGTERM. SIGUSR1: a stray write into the first shard it
    // holds (fetch, publish), as a bad DIMM or a write without
    // begin-mutation would make.
    for (uint64_t strays = 0; !args.has("exit") && !g_stop;) {
        if (!g_stray || shards.empty()) {
            pause();
            continue;
        }
        g_stray = 0;
        stray_write(shards[0], strays++);
    }
    for (th_replica *r : held) th_replica_release(r);
    th_client_destroy(c);
    return 0;
}
