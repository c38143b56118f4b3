// th_fault_driver: randomized fault injection against a real tensorhub
// cluster of processes (a tensorhub-server, a publisher and readers that are
// th_test_worker processes verifying every byte they fetch). Each run starts a
// fresh cluster, injects ONE fault of one kind at a seeded random point, then
// checks the invariants:
//   - every completed fetch had exactly the published bytes of one version
//     (the worker checks; "corrupt", "mixed" or another version = violation);
//   - no reader hangs: each one finishes or fails within a bound, and every
//     process still running at the end exits within a bound of SIGTERM;
//   - readers in flight at the fault complete (the library recovers), and the
//     version stays fetchable by a fresh reader while a live holder exists.
// See tests/fault/README.md for the fault kinds and how to read the table.
//
//   th_fault_driver --server-bin PATH --worker-bin PATH
//                   [--seed S] [--kinds k1,k2] [--runs N] [--long] [--log-dir DIR] [--keep-logs]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "args.hpp"
#include "child.hpp"
#include "tcp_proxy.hpp"
#include "tensorhub/tensorhub.h"

namespace th_fault {
namespace {

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;
using nlohmann::json;

void sleep_ms(int64_t ms) { std::this_thread::sleep_for(Ms(std::max<int64_t>(ms, 0))); }
int64_t ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration_cast<Ms>(b - a).count();
}

// ---------------------------------------------------------------------------
// Options and fault kinds
// ---------------------------------------------------------------------------

enum class Kind { SourceKill, SourceStop, ServerKill, Mutation, ControlFaults, ReaderKill };

struct KindInfo {
    Kind kind;
    const char *name;
};
constexpr KindInfo kKinds[] = {
    {Kind::SourceKill, "source-kill"},   {Kind::SourceStop, "source-stop"},       {Kind::ServerKill, "server-kill"},
    {Kind::Mutation, "mutation"},        {Kind::ControlFaults, "control-faults"}, {Kind::ReaderKill, "reader-kill"},
};

struct Options {
    std::string server_bin, worker_bin, log_dir;
    uint64_t seed = 20240611;  // fixed by default: ctest runs are reproducible
    int runs = 2;
    bool keep_logs = false;
    std::vector<KindInfo> kinds;
};

const char *kUsage =
    "usage: th_fault_driver --server-bin PATH --worker-bin PATH\n"
    "                       [--seed S] [--kinds k1,k2] [--runs N] [--long] [--log-dir DIR] [--keep-logs]\n"
    "  kinds (names or 1-6): source-kill source-stop server-kill mutation control-faults reader-kill\n"
    "  --runs N     runs per kind (default 2; --long: 100)\n"
    "  --seed S     run i of a kind uses seed S+i: '--seed S+i --kinds K --runs 1' replays it\n"
    "  --keep-logs  keep every run's logs (by default only failed runs' logs are kept)\n";

std::vector<KindInfo> parse_kinds(const std::string &list) {
    std::vector<KindInfo> out;
    std::stringstream ss(list);
    for (std::string k; std::getline(ss, k, ',');) {
        bool found = false;
        for (size_t i = 0; i < std::size(kKinds); ++i)
            if (k == kKinds[i].name || k == std::to_string(i + 1)) {
                out.push_back(kKinds[i]);
                found = true;
            }
        if (!found) throw std::runtime_error("unknown fault kind '" + k + "'");
    }
    return out;
}

Options parse_options(int argc, char **argv) {
    th_tools::Args args(argc, argv, {"long", "keep-logs", "help"});
    if (args.has("help")) {
        std::fputs(kUsage, stdout);
        std::exit(0);
    }
    auto bad = args.unknown(
        {"server-bin", "worker-bin", "seed", "kinds", "runs", "long", "log-dir", "keep-logs"});
    if (!bad.empty() || !args.positional().empty())
        throw std::runtime_error("unknown argument " + (bad.empty() ? args.positional()[0] : "--" + bad[0]));
    Options o;
    o.server_bin = args.get("server-bin");
    o.worker_bin = args.get("worker-bin");
    if (o.server_bin.empty() || o.worker_bin.empty())
        throw std::runtime_error("--server-bin and --worker-bin are required");
    o.seed = args.get_u64("seed", o.seed);
    o.runs = static_cast<int>(args.get_u64("runs", args.has("long") ? 100 : 2));
    o.keep_logs = args.has("keep-logs");
    o.log_dir = args.get("log-dir");
    o.kinds = args.has("kinds") ? parse_kinds(args.get("kinds"))
                                : std::vector<KindInfo>(std::begin(kKinds), std::end(kKinds));
    return o;
}

// ---------------------------------------------------------------------------
// What a run records
// ---------------------------------------------------------------------------

struct RunResult {
    bool injected = false;  // the fault hit work in flight (see README)
    int64_t fault_at_ms = -1;
    std::string fault;  // what was done, in words
    int completed = 0, corrupt = 0, hung = 0, errors = 0;
    std::vector<double> recovery_ms;  // per affected reader: fault -> its completion
    std::vector<std::string> violations;
};

// ---------------------------------------------------------------------------
// Server status, read directly from a server (never through the proxy)
// ---------------------------------------------------------------------------

json server_status(const std::string &url, uint32_t timeout_ms = 1000) {
    char *out = nullptr;
    if (th_server_status_json(url.c_str(), timeout_ms, &out) != TH_OK) return nullptr;
    json j = json::parse(out, nullptr, false);
    th_free(out);
    return j.is_discarded() ? json(nullptr) : j;
}

const json *worker_named(const json &status, const std::string &name) {
    if (!status.is_object() || !status.contains("workers")) return nullptr;
    for (const auto &w : status["workers"])
        if (w["name"] == name) return &w;
    return nullptr;
}

// Whether `worker` holds a complete replica of every shard of (model, version).
bool holds_complete(const json &status, const std::string &model, uint64_t version, uint64_t worker, uint32_t shards) {
    if (!status.is_object() || !status.contains("models")) return false;
    for (const auto &m : status["models"]) {
        if (m["name"] != model) continue;
        for (const auto &v : m["versions"]) {
            if (v["version"].get<uint64_t>() != version) continue;
            uint32_t held = 0;
            for (const auto &sh : v["shards"])
                for (const auto &r : sh["replicas"])
                    held += r["worker_id"].get<uint64_t>() == worker && r["complete"].get<bool>();
            return held == shards;
        }
    }
    return false;
}

uint64_t field(const std::string &line, const std::string &key) {
    size_t at = line.find(" " + key + "=");
    return at == std::string::npos ? 0 : std::strtoull(line.c_str() + at + key.size() + 2, nullptr, 10);
}

// ---------------------------------------------------------------------------
// Data shape of one run
// ---------------------------------------------------------------------------

struct Layout {
    std::string model = "m";
    uint64_t version = 1;
    uint32_t shards = 1;
    uint64_t shard_kb = 4096, chunk_kb = 64;
    int tensors = 4;

    uint64_t chunks_per_shard() const {
        uint64_t bytes = (shard_kb << 10) / tensors / 2 * 2 * tensors;  // as th_test_worker sizes it
        uint64_t chunk = chunk_kb << 10;
        return (bytes + chunk - 1) / chunk;
    }
    // How long a reader slowed by delay_us per chunk takes for every shard.
    int64_t slow_fetch_ms(uint64_t delay_us) const {
        return static_cast<int64_t>(shards * chunks_per_shard() * delay_us / 1000);
    }
    std::string shard_list() const {
        std::string s;
        for (uint32_t i = 0; i < shards; ++i) s += (i ? "," : "") + std::to_string(i);
        return s;
    }
    std::vector<std::string> sizes() const {
        return {"--shard-kb", std::to_string(shard_kb), "--tensors", std::to_string(tensors), "--model", model};
    }
};

// How a reader process behaves.
struct ReaderSpec {
    bool serve = false;     // becomes a holder (and stays up until the end)
    uint64_t delay_us = 0;  // TENSORHUB_FAULT_CHUNK_DELAY_US: a slow reader
};

// The outcome line of a reader and when it arrived.
struct Outcome {
    std::string line;
    Clock::time_point at;
};

struct Reader {
    Child *child = nullptr;
    std::shared_future<Outcome> outcome;
    // No result yet: still fetching (or hung).
    bool in_flight() const { return outcome.wait_for(Ms(0)) != std::future_status::ready; }
};

// ---------------------------------------------------------------------------
// One run: its processes, randomness, checks and record
// ---------------------------------------------------------------------------

class Run {
  public:
    Run(const Options &opt, const KindInfo &kind, int index, uint64_t seed, std::string dir)
        : opt_(opt),
          kind_(kind),
          index_(index),
          seed_(seed),
          rng_(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(kind.kind)),
          dir_(std::move(dir)),
          t0_(Clock::now()) {
        std::filesystem::create_directories(dir_);
    }
    // Whatever happened: every child dies before the watcher threads that read
    // their output are joined, so that nothing outlives the run.
    ~Run() {
        for (auto &c : children_) c->signal(SIGKILL);
        for (auto &f : watchers_) f.wait();
        children_.clear();
        proxy_.reset();
    }

    RunResult result;

    uint64_t pick(uint64_t lo, uint64_t hi) { return std::uniform_int_distribution<uint64_t>(lo, hi)(rng_); }
    bool coin() { return pick(0, 1) == 1; }

    // A violation: recorded with what was seen, and printed at once.
    void violation(const std::string &what, const Child *about = nullptr) {
        std::string msg = std::string(kind_.name) + " run " + std::to_string(index_) + " (seed " +
                          std::to_string(seed_) + "): " + what;
        if (about) {
            msg += "\n    log " + about->log() + ", last lines:\n" + about->log_tail(15);
            reported_.insert(about);
        }
        std::fprintf(stdout, "  VIOLATION %s\n", msg.c_str());
        std::fflush(stdout);
        result.violations.push_back(msg);
    }

    // --- processes ---------------------------------------------------------

    Child &spawn(const std::string &name, const std::string &binary, const std::vector<std::string> &args,
                 std::vector<std::string> env = {}) {
        // Keep the data plane on the loopback too, unless the caller chose.
        if (!std::getenv("UCX_NET_DEVICES")) env.push_back("UCX_NET_DEVICES=lo");
        env.push_back("TENSORHUB_LOG_LEVEL=info");  // "dropping source" lines are our evidence
        children_.push_back(std::make_unique<Child>(name, binary, args, env, dir_ + "/" + name + ".log"));
        return *children_.back();
    }

    // A tensorhub-server process; returns its URL ("" and a violation if it
    // does not come up).
    std::string start_server(const std::string &name, uint32_t lease_ms) {
        Child &c =
            spawn(name, opt_.server_bin, {"--listen", "tcp://127.0.0.1:0", "--lease-ms", std::to_string(lease_ms)});
        std::string l = c.line(10000);
        if (l.rfind("listening on ", 0) != 0) {
            violation("server " + name + " did not start: '" + l + "'", &c);
            return "";
        }
        servers_[name] = &c;
        return l.substr(13);
    }
    Child *server(const std::string &name) { return servers_[name]; }
    // A proxy in front of a server; it lives as long as the run, so that the
    // workers still reach the server through it when they shut down.
    TcpProxy &start_proxy(const std::string &server_url) {
        proxy_ =
            std::make_unique<TcpProxy>(static_cast<uint16_t>(std::stoul(server_url.substr(server_url.rfind(':') + 1))));
        return *proxy_;
    }
    Child *child(const std::string &name) {
        for (auto &c : children_)
            if (c->name() == name) return c.get();
        return nullptr;
    }

    // Common client options of every worker in the run.
    void set_client_options(std::vector<std::string> opts) { client_opts_ = std::move(opts); }
    uint32_t timeout_ms() const {
        for (size_t i = 0; i + 1 < client_opts_.size(); ++i)
            if (client_opts_[i] == "--timeout-ms") return static_cast<uint32_t>(std::stoul(client_opts_[i + 1]));
        return 10000;
    }
    // A reader that neither finishes nor fails by then is hung: the fetch's
    // own deadline (timeout x 6, th_fetch's default) plus resolve and slack.
    int hung_bound_ms() const { return static_cast<int>(timeout_ms()) * 8 + 5000; }

    Child &worker(const std::string &name, std::vector<std::string> args, std::vector<std::string> env = {}) {
        return worker_from(opt_.worker_bin, name, std::move(args), std::move(env));
    }
    // A publisher of `layout`; returns its worker id (0 on failure, recorded).
    uint64_t start_publisher(const std::string &url, const Layout &layout) {
        std::vector<std::string> args = {"publish", "--server", url, "--version", std::to_string(layout.version)};
        args.insert(args.end(), {"--shards", std::to_string(layout.shards)});
        args.insert(args.end(), {"--chunk-kb", std::to_string(layout.chunk_kb)});
        auto sizes = layout.sizes();
        args.insert(args.end(), sizes.begin(), sizes.end());
        Child &c = worker("publisher", args);
        std::string l = c.line(15000);
        if (l.rfind("ready", 0) != 0) {
            violation("the publisher did not get ready: '" + l + "'", &c);
            return 0;
        }
        return field(l, "worker");
    }

    // A reader fetching every shard of LATEST; its outcome is watched.
    Reader start_reader(const std::string &name, const std::string &url, const Layout &layout, const ReaderSpec &spec) {
        std::vector<std::string> args = {"fetch", "--server", url, "--shards", layout.shard_list()};
        auto sizes = layout.sizes();
        args.insert(args.end(), sizes.begin(), sizes.end());
        if (!spec.serve) args.insert(args.end(), {"--no-serve", "--exit"});
        std::vector<std::string> env;
        if (spec.delay_us) env.push_back("TENSORHUB_FAULT_CHUNK_DELAY_US=" + std::to_string(spec.delay_us));
        return watch(worker(name, args, env));
    }

    // Reads the child's first output line on a thread, with the hung bound.
    Reader watch(Child &c) {
        int bound = hung_bound_ms();
        auto f = std::async(std::launch::async, [&c, bound] {
                     std::string l = c.line(bound);
                     return Outcome{l, Clock::now()};
                 }).share();
        watchers_.push_back(f);
        return Reader{&c, f};
    }

    // Waits for a reader and checks what it printed. Returns whether it
    // completed with exactly the bytes of `version` (0: any version).
    bool settle(const Reader &r, uint64_t version, Outcome *out = nullptr) {
        Outcome o = r.outcome.get();
        if (out) *out = o;
        const std::string &l = o.line;
        Child &c = *r.child;
        if (l.rfind("ok", 0) == 0) {
            if (version && field(l, "version") && field(l, "version") != version) {
                result.corrupt++;
                violation(c.name() + " fetched version " + std::to_string(field(l, "version")) + ", expected " +
                              std::to_string(version) + ": '" + l + "'", &c);
                return false;
            }
            result.completed++;
            return true;
        }
        if (l.rfind("corrupt", 0) == 0 || l.rfind("mixed", 0) == 0 ||
            l.find("fetched another version") != std::string::npos) {
            result.corrupt++;
            violation(c.name() + " read wrong bytes: '" + l + "'", &c);
        } else if (l.rfind("error", 0) == 0) {
            result.errors++;
            violation(c.name() + " failed although a live holder existed: '" + l + "'", &c);
        } else if (auto how = ended_soon(c)) {
            result.errors++;
            violation(c.name() + " ended (" + *how + ") without a result (crash?), output '" + l + "'", &c);
        } else {
            result.hung++;
            violation(c.name() + " hung: no result within " + std::to_string(hung_bound_ms()) + " ms" + capture_stacks(c),
                      &c);
            c.signal(SIGKILL);
        }
        return false;
    }

    // How the child ended, waiting a little: its stdout reaches EOF just
    // before it becomes a zombie. nullopt if it still runs after that.
    static std::optional<std::string> ended_soon(const Child &c) {
        for (int i = 0; i < 500 && !c.ended(); ++i) sleep_ms(10);
        return c.ended();
    }

    // The version must still be fetchable while one of `holders` lives: a
    // fresh reader (not slowed, not serving) succeeds within `retry_ms`
    // (retries cover a standby server that learns about holders only as they
    // re-register). With no holder alive there is nothing to expect: their
    // crash is reported by finish().
    void expect_available(const std::string &url, const Layout &layout, const std::vector<Child *> &holders,
                          const std::string &context, int retry_ms = 0) {
        auto alive = [&] {
            std::string names;
            for (Child *h : holders)
                if (!h->ended() && !h->killed_by_fault()) names += (names.empty() ? "" : " and ") + h->name();
            return names;
        };
        if (alive().empty()) return;
        auto end = Clock::now() + Ms(retry_ms);
        for (int attempt = 1;; ++attempt) {
            Reader r = start_reader("fresh" + std::to_string(fresh_++), url, layout, {});
            Outcome o = r.outcome.get();
            bool clean_error = o.line.rfind("error", 0) == 0;
            if (clean_error && Clock::now() < end && !alive().empty()) {
                reported_.insert(r.child);  // an expected miss while the standby catches up
                sleep_ms(200);
                continue;
            }
            if (clean_error) {
                // A holder that crashed takes a moment to be reaped (UCX prints
                // a backtrace first): then finish() reports the crash, and the
                // version is not "lost" with a live holder.
                for (int i = 0; i < 300 && !alive().empty(); ++i) sleep_ms(10);
                if (alive().empty()) {
                    reported_.insert(r.child);
                    return;
                }
                result.errors++;
                violation("version " + std::to_string(layout.version) + " was lost although " + alive() + " held it (" +
                              context + "; " + std::to_string(attempt) + " fresh reader(s) failed, last: '" + o.line +
                              "')",
                          r.child);
                return;
            }
            settle(r, layout.version);  // ok, corrupt or hung: counted as such
            return;
        }
    }

    // Waits until the worker named `name` has a read in flight per the server;
    // returns its worker id, or 0 if that did not happen within `ms`.
    uint64_t wait_serving(const std::string &server_url, const std::string &name, int ms) {
        auto end = Clock::now() + Ms(ms);
        while (Clock::now() < end) {
            json s = server_status(server_url, 500);
            if (const json *w = worker_named(s, name); w && (*w)["active_reads"].get<uint64_t>() > 0)
                return (*w)["worker_id"].get<uint64_t>();
            sleep_ms(5);
        }
        return 0;
    }

    // The worker id the server knows `name` by (0 if it does not).
    static uint64_t worker_id(const std::string &server_url, const std::string &name) {
        const json s = server_status(server_url, 1000);
        const json *w = worker_named(s, name);
        return w ? (*w)["worker_id"].get<uint64_t>() : 0;
    }

    void mark_fault(Clock::time_point at, const std::string &what) {
        result.fault_at_ms = ms_between(t0_, at);
        result.fault = what;
    }

    // The affected readers: in flight at the fault and, when the fault hit
    // a source (victim != 0), with a log that shows they dropped it. Any
    // affected reader means the fault was injected; the recovery of each one
    // that completed is the time from the fault to its completion.
    void measure_recovery(const std::vector<Reader> &readers, const std::vector<bool> &in_flight,
                          Clock::time_point fault, uint64_t victim) {
        for (size_t i = 0; i < readers.size(); ++i) {
            if (!in_flight[i]) continue;
            if (victim && !readers[i].child->log_contains("dropping source worker " + std::to_string(victim))) continue;
            result.injected = true;
            Outcome o = readers[i].outcome.get();
            if (o.line.rfind("ok", 0) == 0) result.recovery_ms.push_back(static_cast<double>(ms_between(fault, o.at)));
        }
    }

    // Which readers are still fetching now (call it at the fault).
    static std::vector<bool> in_flight(const std::vector<Reader> &readers) {
        std::vector<bool> out;
        for (const Reader &r : readers) out.push_back(r.in_flight());
        return out;
    }

    // End of the run: every process still up must exit within 8 s of SIGTERM
    // (a stopped one is continued first); those that do not are hung. Workers
    // go first and servers last, as in an orderly shutdown: a worker whose
    // server is already gone is another fault (see README, known bugs).
    // Then any process that died on its own and was not reported yet (a
    // crash) is a violation.
    void finish() {
        std::vector<Child *> workers, servers;
        for (auto &c : children_)
            if (!c->killed_by_fault() && !c->ended()) {
                bool is_server =
                    std::any_of(servers_.begin(), servers_.end(), [&](auto &s) { return s.second == c.get(); });
                (is_server ? servers : workers).push_back(c.get());
            }
        terminate(workers);
        terminate(servers);
        for (auto &c : children_) {
            if (c->killed_by_fault() || reported_.count(c.get())) continue;
            if (auto how = c->ended(); how && *how != "exit 0")
                violation(c->name() + " ended with " + *how + (how->rfind("signal", 0) == 0 ? " (crash)" : ""),
                          c.get());
        }
    }

  private:
    // Where a hung process is stuck: its threads' stacks, by gdb when there
    // is one, written next to its log. Returns a note for the violation.
    std::string capture_stacks(const Child &c) {
        if (access("/usr/bin/gdb", X_OK) != 0) return "";
        std::string out = dir_ + "/" + c.name() + ".stacks";
        std::string cmd = "timeout 60 /usr/bin/gdb -p " + std::to_string(c.pid()) +
                          " -batch -ex 'thread apply all bt' >" + out + " 2>&1";
        return std::system(cmd.c_str()) == 0 ? "; its stacks: " + out : "";
    }

    Child &worker_from(const std::string &binary, const std::string &name, std::vector<std::string> args,
                       std::vector<std::string> env) {
        args.insert(args.end(), {"--name", name});
        args.insert(args.end(), client_opts_.begin(), client_opts_.end());
        return spawn(name, binary, args, std::move(env));
    }

    // SIGTERM, then up to 8 s to exit; how they ended is judged by finish().
    void terminate(const std::vector<Child *> &up) {
        for (Child *c : up) {
            c->signal(SIGCONT);
            c->signal(SIGTERM);
        }
        auto end = Clock::now() + Ms(8000);
        for (Child *c : up) {
            while (!c->ended() && Clock::now() < end) sleep_ms(5);
            if (!c->ended()) {
                result.hung++;
                violation(c->name() + " did not exit within 8 s of SIGTERM (hung on shutdown)" + capture_stacks(*c), c);
            }
        }
    }

    const Options &opt_;
    KindInfo kind_;
    int index_;
    uint64_t seed_;
    std::mt19937_64 rng_;
    std::string dir_;
    Clock::time_point t0_;
    std::vector<std::unique_ptr<Child>> children_;
    std::vector<std::shared_future<Outcome>> watchers_;
    std::map<std::string, Child *> servers_;
    std::set<const Child *> reported_;  // failures already reported
    std::unique_ptr<TcpProxy> proxy_;
    std::vector<std::string> client_opts_;
    int fresh_ = 0;
};

// ---------------------------------------------------------------------------
// Scenario building blocks
// ---------------------------------------------------------------------------

// A random data shape: 1-2 shards of 4 MiB in 64 KiB chunks, 2-5 tensors.
Layout random_layout(Run &run) {
    Layout l;
    l.version = run.pick(1, 1000);
    l.shards = static_cast<uint32_t>(run.pick(1, 2));
    l.tensors = static_cast<int>(run.pick(2, 5));
    return l;
}

// Slow readers: 2-3, each 3-6 ms per chunk, none serving (so that each one
// reads from a holder we started, and a source we hit is one we chose).
std::vector<Reader> start_slow_readers(Run &run, const std::string &url, const Layout &layout, uint64_t *max_delay_us,
                                       bool serve = false) {
    std::vector<Reader> out;
    int n = static_cast<int>(run.pick(2, 3));
    *max_delay_us = 0;
    for (int i = 0; i < n; ++i) {
        ReaderSpec spec{serve, run.pick(3000, 6000)};
        *max_delay_us = std::max(*max_delay_us, spec.delay_us);
        out.push_back(run.start_reader("slow" + std::to_string(i), url, layout, spec));
    }
    return out;
}

// The moment to strike: a random point in the first half of the transfer.
void sleep_random_part_of(Run &run, int64_t transfer_ms) {
    sleep_ms(static_cast<int64_t>(run.pick(0, std::max<int64_t>(transfer_ms / 2, 1))));
}

// A publisher plus a complete second holder "r1" (a serving reader): the
// version survives losing either. Returns {publisher id, r1 id}.
std::pair<uint64_t, uint64_t> two_holders(Run &run, const std::string &url, const Layout &layout) {
    uint64_t pub = run.start_publisher(url, layout);
    if (!pub) return {0, 0};
    Reader r1 = run.start_reader("r1", url, layout, {true, 0});
    Outcome o;
    if (!run.settle(r1, layout.version, &o)) return {0, 0};
    return {pub, field(o.line, "worker")};
}

// ---------------------------------------------------------------------------
// The fault kinds
// ---------------------------------------------------------------------------


// (1) and (2): a source that serves slow readers dies (SIGKILL) or pauses
// beyond its lease (SIGSTOP, then SIGCONT). The victim is the publisher or the
// second complete holder r1, at random: the version survives either.
void holder_fault(Run &run, bool pause) {
    const uint32_t lease_ms = pause ? 1500 : 3000;
    std::string url = run.start_server("server", lease_ms);
    if (url.empty()) return;
    run.set_client_options({"--heartbeat-ms", "200", "--timeout-ms", "2000", "--chunk-timeout-ms", "1000"});
    Layout layout = random_layout(run);
    auto [pub_id, r1_id] = two_holders(run, url, layout);
    if (!pub_id || !r1_id) return;
    uint64_t delay_us = 0;
    std::vector<Reader> readers = start_slow_readers(run, url, layout, &delay_us);

    bool victim_is_pub = run.coin();
    Child &victim = *run.child(victim_is_pub ? "publisher" : "r1");
    const uint64_t victim_id = victim_is_pub ? pub_id : r1_id;
    Child *survivor = run.child(victim_is_pub ? "r1" : "publisher");
    bool serving = run.wait_serving(url, victim.name(), 5000) != 0;
    sleep_random_part_of(run, layout.slow_fetch_ms(delay_us));

    auto fault = Clock::now();
    victim.signal(pause ? SIGSTOP : SIGKILL);
    auto flying = Run::in_flight(readers);
    run.mark_fault(fault, std::string(pause ? "SIGSTOP " : "SIGKILL ") + victim.name() +
                              (serving ? " while it served" : " (never seen serving)"));
    for (const Reader &r : readers) run.settle(r, layout.version);
    run.measure_recovery(readers, flying, fault, victim_id);
    if (!pause) {
        run.expect_available(url, layout, {survivor}, victim.name() + " was killed");
        return;
    }
    // Past the lease the server has dropped the paused holder; the survivor
    // must serve alone. Then the paused one resumes and must register again
    // with its replica (it is told it is unknown and re-publishes).
    sleep_ms(lease_ms + static_cast<int64_t>(run.pick(200, 1000)) - ms_between(fault, Clock::now()));
    run.expect_available(url, layout, {survivor}, victim.name() + " is paused past its lease");
    victim.signal(SIGCONT);
    auto resumed = Clock::now();
    while (!holds_complete(server_status(url), layout.model, layout.version, victim_id, layout.shards) &&
           ms_between(resumed, Clock::now()) < 5000)
        sleep_ms(20);
    if (!holds_complete(server_status(url), layout.model, layout.version, victim_id, layout.shards))
        run.violation(victim.name() + " did not register its replica again within 5 s of SIGCONT", &victim);
    if (auto how = victim.ended()) run.violation(victim.name() + " ended (" + *how + ") after SIGCONT", &victim);
}

// (3): the server the clients use is SIGKILLed with fetches in flight; every
// client was given both URLs, so they move to the standby, which takes over
// above the dead server's epoch and rebuilds its view from the workers.
void server_kill(Run &run) {
    std::string a = run.start_server("serverA", 3000), b = run.start_server("serverB", 3000);
    if (a.empty() || b.empty()) return;
    // Either order: which server the list names first matters to clients.
    const std::string both = run.coin() ? a + "," + b : b + "," + a;
    run.set_client_options({"--heartbeat-ms", "200", "--timeout-ms", "1500", "--chunk-timeout-ms", "1000"});
    Layout layout = random_layout(run);
    if (!run.start_publisher(both, layout)) return;
    uint64_t delay_us = 0;
    std::vector<Reader> readers = start_slow_readers(run, both, layout, &delay_us, /*serve=*/run.coin());

    // Clients start on the server of the newest epoch: that is the one to kill.
    auto epoch = [](const std::string &url) {
        json s = server_status(url);
        return s.is_object() ? s["server_epoch"].get<uint64_t>() : 0;
    };
    uint64_t ea = epoch(a), eb = epoch(b);
    bool a_active = ea > eb;
    const std::string active = a_active ? a : b, standby = a_active ? b : a;
    const uint64_t active_epoch = std::max(ea, eb);
    Child &victim = *run.server(a_active ? "serverA" : "serverB");
    run.wait_serving(active, "publisher", 5000);
    sleep_random_part_of(run, layout.slow_fetch_ms(delay_us));

    auto fault = Clock::now();
    victim.signal(SIGKILL);
    auto flying = Run::in_flight(readers);
    const bool listed_first = both.rfind(active, 0) == 0;
    run.mark_fault(fault, "SIGKILL " + victim.name() + " (listed " + (listed_first ? "first" : "last") + ") with " +
                              std::to_string(std::count(flying.begin(), flying.end(), true)) + " fetches in flight");
    for (const Reader &r : readers) run.settle(r, layout.version);
    run.measure_recovery(readers, flying, fault, 0);
    run.expect_available(both, layout, {run.child("publisher")}, "the standby learns of it as it re-registers", 10000);
    json s = server_status(standby);
    if (!s.is_object() || s["server_epoch"].get<uint64_t>() <= active_epoch)
        run.violation("the standby did not take over above the dead server's epoch " + std::to_string(active_epoch) +
                      ": status " +
                      (s.is_object() ? std::to_string(s["server_epoch"].get<uint64_t>()) : "unreachable"));
}

// (4): the publisher rewrites its buffers version after version (publish-loop:
// release v-2, overwrite, publish v) while slowed fetch-loop readers read;
// a reader must never return bytes of a rewritten buffer, nor mix versions
// across shards. Evidence that a rewrite hit a read: the readers' logs.
void mutation(Run &run) {
    std::string url = run.start_server("server", 3000);
    if (url.empty()) return;
    run.set_client_options({"--heartbeat-ms", "200", "--timeout-ms", "2000", "--chunk-timeout-ms", "1000"});
    Layout layout;
    layout.shards = static_cast<uint32_t>(run.pick(1, 3));
    layout.shard_kb = 1024;
    layout.tensors = 3;
    const uint64_t delay_ms = run.pick(2, 15), for_ms = run.pick(1200, 2000);
    // Versions enough to keep rewriting until the readers stop (a version
    // takes about shards x delay plus ~3 ms of filling and publishing).
    layout.version = std::min<uint64_t>(for_ms / (layout.shards * delay_ms + 3) + 20, 600);
    std::vector<std::string> args = {"publish-loop", "--server", url, "--shards", std::to_string(layout.shards)};
    args.insert(args.end(), {"--versions", std::to_string(layout.version), "--delay-ms", std::to_string(delay_ms),
                             "--chunk-kb", std::to_string(layout.chunk_kb)});
    auto sizes = layout.sizes();
    args.insert(args.end(), sizes.begin(), sizes.end());
    Child &pub = run.worker("publisher", args);
    sleep_ms(static_cast<int64_t>(run.pick(0, 300)));

    std::vector<Reader> readers;
    int n = static_cast<int>(run.pick(2, 3));
    for (int i = 0; i < n; ++i) {
        std::vector<std::string> rargs = {"fetch-loop", "--server", url, "--shards", std::to_string(layout.shards),
                                          "--for-ms", std::to_string(for_ms)};
        rargs.insert(rargs.end(), sizes.begin(), sizes.end());
        readers.push_back(
            run.watch(run.worker("loop" + std::to_string(i), rargs,
                                       {"TENSORHUB_FAULT_CHUNK_DELAY_US=" + std::to_string(run.pick(0, 800))})));
    }
    run.mark_fault(Clock::now(), "publish-loop of " + std::to_string(layout.version) + " versions x " +
                                     std::to_string(layout.shards) + " shards every " + std::to_string(delay_ms) +
                                     " ms under " + std::to_string(n) + " fetch-loop readers");
    size_t hits = 0;
    for (const Reader &r : readers) {
        Outcome o;
        if (run.settle(r, 0, &o)) run.result.completed += static_cast<int>(field(o.line, "fetched")) - 1;
        hits += r.child->log_count("its buffers changed while being read") +
                r.child->log_count("its buffers are being modified");
    }
    run.result.injected = hits > 0;
    run.result.fault += ": " + std::to_string(hits) + " reads hit a rewrite";
    std::string ready = pub.line(30000);
    if (ready.rfind("ready", 0) != 0) {
        auto how = Run::ended_soon(pub);
        run.violation(how ? "the publisher ended (" + *how + ") before the end of its loop, output '" + ready + "'"
                          : "the publisher's loop did not end within 30 s",
                      &pub);
        if (!how) run.result.hung++;
        return;
    }
    run.expect_available(url, layout, {&pub}, "the last version of the loop");
}

// (5): control messages between every client and the server go through a
// TCP proxy that, for a short window, delays them, resets the connections or
// swallows them (then resets). A reader started inside the window does its
// whole control conversation (hello, resolve, plan) through the fault.
void control_faults(Run &run) {
    std::string url = run.start_server("server", 3000);
    if (url.empty()) return;
    TcpProxy &proxy = run.start_proxy(url);
    run.set_client_options({"--heartbeat-ms", "200", "--timeout-ms", "3000", "--chunk-timeout-ms", "1000"});
    Layout layout = random_layout(run);
    if (!run.start_publisher(proxy.url(), layout)) return;
    uint64_t delay_us = 0;
    std::vector<Reader> readers = start_slow_readers(run, proxy.url(), layout, &delay_us, /*serve=*/run.coin());
    run.wait_serving(url, "publisher", 5000);
    sleep_random_part_of(run, layout.slow_fetch_ms(delay_us));

    static const std::pair<TcpProxy::Mode, const char *> modes[] = {
        {TcpProxy::Mode::Delay, "delay"}, {TcpProxy::Mode::Reset, "reset"}, {TcpProxy::Mode::Drop, "drop"}};
    auto [mode, mode_name] = modes[run.pick(0, 2)];
    const int64_t window = static_cast<int64_t>(run.pick(200, 1000)), delay = static_cast<int64_t>(run.pick(50, 500));
    const uint64_t touched_before = proxy.touched();
    auto fault = Clock::now();
    proxy.fault(mode, Ms(window), Ms(delay));
    readers.push_back(run.start_reader("late", proxy.url(), layout, {}));
    auto flying = Run::in_flight(readers);
    run.mark_fault(fault,
                   std::string("proxy ") + mode_name + " for " + std::to_string(window) + " ms" +
                       (mode == TcpProxy::Mode::Delay ? " (+" + std::to_string(delay) + " ms per message)" : ""));
    for (const Reader &r : readers) run.settle(r, layout.version);
    run.measure_recovery(readers, flying, fault, 0);
    run.result.injected = proxy.touched() > touched_before;
    run.result.fault += ", " + std::to_string(proxy.touched() - touched_before) + " messages/connections hit";
    run.expect_available(proxy.url(), layout, {run.child("publisher")}, "after the proxy healed");
}

// (6): a serving reader A, slowed, is SIGKILLed mid-fetch while followers
// read A's filling replica one hop behind it; they must finish elsewhere.
void reader_kill(Run &run) {
    std::string url = run.start_server("server", 3000);
    if (url.empty()) return;
    run.set_client_options({"--heartbeat-ms", "200", "--timeout-ms", "2000", "--chunk-timeout-ms", "1000"});
    Layout layout = random_layout(run);
    if (!run.start_publisher(url, layout)) return;
    const uint64_t a_delay = run.pick(4000, 8000);
    Reader a = run.start_reader("A", url, layout, {true, a_delay});
    // A registers its filling replica with its plan, so once A reads from
    // the publisher, followers are routed to A (an idle source beats a busy one).
    run.wait_serving(url, "publisher", 5000);
    std::vector<Reader> followers;
    int n = static_cast<int>(run.pick(1, 2));
    for (int i = 0; i < n; ++i) followers.push_back(run.start_reader("follower" + std::to_string(i), url, layout, {}));
    bool followed = run.wait_serving(url, "A", 5000) != 0;
    const uint64_t a_id = Run::worker_id(url, "A");
    sleep_random_part_of(run, layout.slow_fetch_ms(a_delay));

    const bool a_fetching = a.in_flight();
    auto fault = Clock::now();
    a.child->signal(SIGKILL);
    auto flying = Run::in_flight(followers);
    run.mark_fault(fault, std::string("SIGKILL reader A mid-fetch") +
                              (followed ? " while followed" : " (never seen followed)") +
                              (a_fetching ? "" : ", but A had already finished"));
    for (const Reader &r : followers) run.settle(r, layout.version);
    run.measure_recovery(followers, flying, fault, a_id);
    run.expect_available(url, layout, {run.child("publisher")}, "reader A was killed");
}

void run_scenario(Run &run, Kind kind) {
    switch (kind) {
    case Kind::SourceKill: return holder_fault(run, false);
    case Kind::SourceStop: return holder_fault(run, true);
    case Kind::ServerKill: return server_kill(run);
    case Kind::Mutation: return mutation(run);
    case Kind::ControlFaults: return control_faults(run);
    case Kind::ReaderKill: return reader_kill(run);
    }
}

// ---------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------

struct KindSummary {
    int runs = 0, injected = 0, completed = 0, corrupt = 0, hung = 0, failed = 0;
    std::vector<double> recovery;
};

// Nearest-rank percentile of a non-empty sample.
double percentile(std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
    return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

void print_run(const KindInfo &k, int index, uint64_t seed, const RunResult &r, bool passed) {
    std::string rec;
    for (double ms : r.recovery_ms) rec += (rec.empty() ? "" : ",") + std::to_string(static_cast<int64_t>(ms));
    std::printf(
        "%-14s #%-3d seed=%-10llu %s | fault at %lld ms: %s | injected %s | %d fetches ok, %d failed | recovery %s "
        "ms\n",
        k.name, index, static_cast<unsigned long long>(seed), passed ? "PASS" : "FAIL",
        static_cast<long long>(r.fault_at_ms), r.fault.empty() ? "(none: setup failed)" : r.fault.c_str(),
        r.injected ? "yes" : "no", r.completed, r.errors, rec.empty() ? "-" : rec.c_str());
    std::fflush(stdout);
}

void print_table(const std::vector<KindInfo> &kinds, std::map<std::string, KindSummary> &sums) {
    std::printf("\n%-14s | %4s | %15s | %17s | %7s | %4s | %s\n", "fault kind", "runs", "faults injected",
                "fetches completed", "corrupt", "hung", "recovery median / p99 ms");
    std::printf("%s\n", std::string(100, '-').c_str());
    for (const KindInfo &k : kinds) {
        const KindSummary &s = sums[k.name];
        char rec[64] = "- / -";
        if (!s.recovery.empty())
            std::snprintf(rec, sizeof rec, "%.0f / %.0f", percentile(s.recovery, 50), percentile(s.recovery, 99));
        std::printf("%-14s | %4d | %15d | %17d | %7d | %4d | %s\n", k.name, s.runs, s.injected, s.completed, s.corrupt,
                    s.hung, rec);
    }
}

std::string make_log_root(const Options &opt) {
    if (!opt.log_dir.empty()) {
        std::filesystem::create_directories(opt.log_dir);
        return opt.log_dir;
    }
    char tmpl[] = "/tmp/th_fault.XXXXXX";
    if (!mkdtemp(tmpl)) throw std::runtime_error("cannot create a log directory in /tmp");
    return tmpl;
}

void on_fatal_signal(int sig) {
    kill_all_children();
    _exit(128 + sig);
}

int main_impl(int argc, char **argv) {
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, on_fatal_signal);
    Options opt = parse_options(argc, argv);
    std::string root = make_log_root(opt);
    std::printf("th_fault_driver: seed %llu, %d run(s) per kind, logs under %s\n",
                static_cast<unsigned long long>(opt.seed), opt.runs, root.c_str());
    std::fflush(stdout);

    std::map<std::string, KindSummary> sums;
    std::vector<std::string> failures;
    int passed = 0, failed = 0;
    for (const KindInfo &k : opt.kinds) {
        for (int i = 0; i < opt.runs; ++i) {
            uint64_t seed = opt.seed + static_cast<uint64_t>(i);
            std::string dir = root + "/" + k.name + "-" + std::to_string(i);
            RunResult r;
            {
                Run run(opt, k, i, seed, dir);
                try {
                    run_scenario(run, k.kind);
                    run.finish();
                } catch (const std::exception &e) {
                    run.violation(std::string("driver error: ") + e.what());
                }
                r = run.result;
            }  // every child of the run is gone here
            bool ok = r.violations.empty();
            print_run(k, i, seed, r, ok);
            KindSummary &s = sums[k.name];
            s.runs++;
            s.injected += r.injected;
            s.completed += r.completed;
            s.corrupt += r.corrupt;
            s.hung += r.hung;
            s.recovery.insert(s.recovery.end(), r.recovery_ms.begin(), r.recovery_ms.end());
            (ok ? passed : failed)++;
            if (ok && !opt.keep_logs) std::filesystem::remove_all(dir);
            if (!ok)
                failures.push_back(std::string(k.name) + " run " + std::to_string(i) + ": replay with --seed " +
                                   std::to_string(seed) + " --kinds " + k.name + " --runs 1; logs in " + dir);
        }
        if (sums[k.name].injected == 0)
            std::printf("  note: no %s run hit work in flight; try more --runs\n", k.name);
    }
    print_table(opt.kinds, sums);
    for (const std::string &f : failures) std::printf("FAILED %s\n", f.c_str());
    if (failures.empty() && !opt.keep_logs && opt.log_dir.empty()) std::filesystem::remove_all(root);
    std::printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace th_fault

int main(int argc, char **argv) {
    try {
        return th_fault::main_impl(argc, argv);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "th_fault_driver: %s\n%s", e.what(), th_fault::kUsage);
        th_fault::kill_all_children();
        return 2;
    }
}
