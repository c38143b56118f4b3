// One run of the fault-injection suite: the processes of a small tensorhub
// cluster, the run's seeded randomness, the invariant checks and what the run
// records. Each fault kind (kinds/*.cpp) builds its cluster from these parts.
#pragma once

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "child.hpp"
#include "tcp_proxy.hpp"
#include "tensorhub/tensorhub.h"

namespace th_fault {

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;
using nlohmann::json;

inline void sleep_ms(int64_t ms) { std::this_thread::sleep_for(Ms(std::max<int64_t>(ms, 0))); }
inline int64_t ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration_cast<Ms>(b - a).count();
}

enum class Kind { SourceKill, SourceStop, ServerKill, Mutation, ControlFaults, ReaderKill, SpotLoss, Chaos, ChaosEtcd };

struct KindInfo {
    Kind kind;
    const char *name;
};

struct Options {
    std::string server_bin, worker_bin, log_dir;
    uint64_t seed = 20240611;  // fixed by default: ctest runs are reproducible
    int runs = 2;
    bool keep_logs = false;
    int chaos_seconds = 20;  // how long one chaos run lasts
    std::vector<KindInfo> kinds;
};

// ---------------------------------------------------------------------------
// What a run records
// ---------------------------------------------------------------------------

struct RunResult {
    bool injected = false;  // the fault hit work in flight (see README)
    int64_t fault_at_ms = -1;
    std::string fault;  // what was done, in words
    int completed = 0, corrupt = 0, hung = 0, errors = 0;
    int faults = 1;  // faults injected in the run (chaos: many)
    std::vector<double> recovery_ms;  // per affected reader: fault -> its completion
    std::vector<std::string> violations;
};

// ---------------------------------------------------------------------------
// Server status, read directly from a server (never through the proxy)
// ---------------------------------------------------------------------------

inline json server_status(const std::string &url, uint32_t timeout_ms = 1000) {
    char *out = nullptr;
    if (th_server_status_json(url.c_str(), timeout_ms, &out) != TH_OK) return nullptr;
    json j = json::parse(out, nullptr, false);
    th_free(out);
    return j.is_discarded() ? json(nullptr) : j;
}

inline const json *worker_named(const json &status, const std::string &name) {
    if (!status.is_object() || !status.contains("workers")) return nullptr;
    for (const auto &w : status["workers"])
        if (w["name"] == name) return &w;
    return nullptr;
}

// Whether `worker` holds a complete replica of every shard of (model, version).
inline bool holds_complete(const json &status, const std::string &model, uint64_t version, uint64_t worker, uint32_t shards) {
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

inline uint64_t field(const std::string &line, const std::string &key) {
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
    std::string start_server(const std::string &name, uint32_t lease_ms, bool standby = false,
                             const std::string &listen = "tcp://127.0.0.1:0", const std::vector<std::string> &more = {}) {
        std::vector<std::string> args = {"--listen", listen, "--lease-ms", std::to_string(lease_ms)};
        if (standby) args.push_back("--standby");
        args.insert(args.end(), more.begin(), more.end());
        Child &c = spawn(name, opt_.server_bin, args);
        std::string l = c.line(10000);
        if (l.rfind("listening on ", 0) != 0) {
            violation("server " + name + " did not start: '" + l + "'", &c);
            return "";
        }
        servers_[name] = &c;
        return l.substr(13);
    }
    Child *server(const std::string &name) { return servers_[name]; }
    // An etcd of this run's own (etcd-server from Debian, on PATH), data in
    // the run's folder; returns its "127.0.0.1:port" ("" and a violation if
    // it does not come up).
    std::string start_etcd(const std::string &name) {
        auto port = [] {
            int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            sockaddr_in a{};
            a.sin_family = AF_INET;
            a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            socklen_t len = sizeof a;
            bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a);
            getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len);
            close(fd);
            return std::to_string(ntohs(a.sin_port));
        };
        std::string client = "127.0.0.1:" + port(), peer = "http://127.0.0.1:" + port();
        Child &c = spawn(name, "etcd",
                         {"--name", "t", "--data-dir", dir_ + "/" + name + ".data", "--listen-client-urls",
                          "http://" + client, "--advertise-client-urls", "http://" + client, "--listen-peer-urls", peer,
                          "--initial-advertise-peer-urls", peer, "--initial-cluster", "t=" + peer});
        for (auto until = Clock::now() + Ms(20000); Clock::now() < until; sleep_ms(100)) {
            int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            sockaddr_in a{};
            a.sin_family = AF_INET;
            a.sin_port = htons(static_cast<uint16_t>(std::stoul(client.substr(10))));
            a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            bool up = connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0;
            close(fd);
            if (up) {
                infra_.insert(&c);
                return client;
            }
        }
        violation("etcd did not start (Debian: apt-get install etcd-server)", &c);
        return "";
    }
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

    // Reads the child's first output line on a thread, with the hung bound
    // (plus extra_ms, for a child that loops that long before it answers).
    Reader watch(Child &c, int extra_ms = 0) {
        int bound = hung_bound_ms() + extra_ms;
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

    // Waits for a publish-loop to print "ready" (its loop ended); false, with
    // a violation (a crash, or a hang), if it does not within 30 s.
    // *published: the last version it published.
    bool loop_ended(Child &publisher, const std::string &who, uint64_t *published = nullptr) {
        std::string ready = publisher.line(30000);
        if (published) *published = field(ready, "published");
        if (ready.rfind("ready", 0) == 0) return true;
        auto how = ended_soon(publisher);
        violation(how ? who + " ended (" + *how + ") before the end of its loop, output '" + ready + "'"
                      : who + "'s loop did not end within 30 s",
                  &publisher);
        if (!how) result.hung++;
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
        std::vector<Child *> workers, servers, infra;
        for (auto &c : children_)
            if (!c->killed_by_fault() && !c->ended()) {
                bool is_server =
                    std::any_of(servers_.begin(), servers_.end(), [&](auto &s) { return s.second == c.get(); });
                (infra_.count(c.get()) ? infra : is_server ? servers : workers).push_back(c.get());
            }
        terminate(workers);
        terminate(servers);
        terminate(infra);  // etcd last: servers resign there as they stop
        for (auto &c : children_) {
            if (c->killed_by_fault() || reported_.count(c.get())) continue;
            auto how = c->ended();
            if (infra_.count(c.get()) && how == "signal 15") continue;  // etcd re-raises SIGTERM
            if (how && *how != "exit 0")
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
        if (std::system(cmd.c_str()) != 0) return "";
        return "; its stacks: " + out + "\n" + stack_summary(out);
    }

    // The frames of each thread, shortened to the function names, so that a
    // hang reported from a machine whose files are out of reach still says
    // where each thread was.
    static std::string stack_summary(const std::string &path) {
        std::ifstream in(path);
        std::string line, out;
        int frames = 0;
        while (std::getline(in, line)) {
            if (line.rfind("Thread ", 0) == 0) {
                out += "      " + line.substr(0, line.find(" (")) + ":";
                frames = 0;
            } else if (line.rfind('#', 0) == 0 && frames < 12) {
                // "#3  0x... in th::Foo::bar (this=...) at file:line" -> "th::Foo::bar"
                size_t start = line.find_first_not_of(' ', line.find(' '));
                if (line.compare(start, 2, "0x") == 0 && line.find(" in ", start) != std::string::npos)
                    start = line.find(" in ", start) + 4;
                std::string fn = line.substr(start, line.find(" (", start) - start);
                out += (frames++ ? " < " : " ") + fn;
            } else if (line.empty() && frames) {
                out += "\n";
                frames = 0;
            }
        }
        return out;
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
    std::set<const Child *> infra_;  // not ours (etcd): stopped last, SIGTERM is a clean end
    std::set<const Child *> reported_;  // failures already reported
    std::unique_ptr<TcpProxy> proxy_;
    std::vector<std::string> client_opts_;
    int fresh_ = 0;
};

// ---------------------------------------------------------------------------
// Scenario building blocks
// ---------------------------------------------------------------------------

// A random data shape: 1-2 shards of 4 MiB in 64 KiB chunks, 2-5 tensors.
inline Layout random_layout(Run &run) {
    Layout l;
    l.version = run.pick(1, 1000);
    l.shards = static_cast<uint32_t>(run.pick(1, 2));
    l.tensors = static_cast<int>(run.pick(2, 5));
    return l;
}

// Slow readers: 2-3, each 3-6 ms per chunk, none serving (so that each one
// reads from a holder we started, and a source we hit is one we chose).
inline std::vector<Reader> start_slow_readers(Run &run, const std::string &url, const Layout &layout, uint64_t *max_delay_us,
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
inline void sleep_random_part_of(Run &run, int64_t transfer_ms) {
    sleep_ms(static_cast<int64_t>(run.pick(0, std::max<int64_t>(transfer_ms / 2, 1))));
}

// A publisher plus a complete second holder "r1" (a serving reader): the
// version survives losing either. Returns {publisher id, r1 id}.
inline std::pair<uint64_t, uint64_t> two_holders(Run &run, const std::string &url, const Layout &layout) {
    uint64_t pub = run.start_publisher(url, layout);
    if (!pub) return {0, 0};
    Reader r1 = run.start_reader("r1", url, layout, {true, 0});
    Outcome o;
    if (!run.settle(r1, layout.version, &o)) return {0, 0};
    return {pub, field(o.line, "worker")};
}

}  // namespace th_fault
