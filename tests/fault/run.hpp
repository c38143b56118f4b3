// One run of the fault-injection suite: the processes of a small tensorhub
// cluster, the run's seeded randomness, the invariant checks and what the run
// records. Each fault kind (kinds/*.cpp) builds its cluster from these parts.
// The definitions are in run.cpp.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "child.hpp"
#include "tcp_proxy.hpp"

namespace th_fault {

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;
using nlohmann::json;

inline void sleep_ms(int64_t ms) { std::this_thread::sleep_for(Ms(std::max<int64_t>(ms, 0))); }
inline int64_t ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration_cast<Ms>(b - a).count();
}

enum class Kind {
    SourceKill, SourceStop, ServerKill, Mutation, ControlFaults, ReaderKill, SpotLoss, Chaos, ChaosEtcd, CorruptHolder
};

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

json server_status(const std::string &url, uint32_t timeout_ms = 1000);

const json *worker_named(const json &status, const std::string &name);

// Whether `worker` holds a complete replica of every shard of (model, version).
bool holds_complete(const json &status, const std::string &model, uint64_t version, uint64_t worker, uint32_t shards);

uint64_t field(const std::string &line, const std::string &key);

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
    // The delay per chunk that makes a slowed reader take about `ms`.
    uint64_t delay_for_ms(uint64_t ms) const { return ms * 1000 / std::max<uint64_t>(1, shards * chunks_per_shard()); }
    std::string shard_list() const {
        std::string s;
        for (uint32_t i = 0; i < shards; ++i) {
            if (i > 0) s += ',';
            s += std::to_string(i);
        }
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
    Run(const Options &opt, const KindInfo &kind, int index, uint64_t seed, std::string dir);
    // Whatever happened: every child dies before the watcher threads that read
    // their output are joined, so that nothing outlives the run.
    ~Run();

    RunResult result;

    uint64_t pick(uint64_t lo, uint64_t hi) { return std::uniform_int_distribution<uint64_t>(lo, hi)(rng_); }
    bool coin() { return pick(0, 1) == 1; }

    // A violation: recorded with what was seen, and printed at once.
    void violation(const std::string &what, const Child *about = nullptr);

    // --- processes ---------------------------------------------------------

    Child &spawn(const std::string &name, const std::string &binary, const std::vector<std::string> &args,
                 std::vector<std::string> env = {});

    // A tensorhub-server process; returns its URL ("" and a violation if it
    // does not come up).
    std::string start_server(const std::string &name, uint32_t lease_ms, bool standby = false,
                             const std::string &listen = "tcp://127.0.0.1:0", const std::vector<std::string> &more = {});
    Child *server(const std::string &name);
    // An etcd of this run's own (etcd-server from Debian, on PATH), data in
    // the run's folder; returns its "127.0.0.1:port" ("" and a violation if
    // it does not come up).
    std::string start_etcd(const std::string &name);
    // A proxy in front of a server; it lives as long as the run, so that the
    // workers still reach the server through it when they shut down.
    TcpProxy &start_proxy(const std::string &server_url);
    Child *child(const std::string &name);

    // Common client options of every worker in the run.
    void set_client_options(std::vector<std::string> opts);
    uint32_t timeout_ms() const;
    // A reader that neither finishes nor fails by then is hung: the fetch's
    // own deadline (timeout x 6, th_fetch's default) plus resolve and slack.
    int hung_bound_ms() const;

    Child &worker(const std::string &name, std::vector<std::string> args, std::vector<std::string> env = {});
    // A publisher of `layout`; returns its worker id (0 on failure, recorded).
    uint64_t start_publisher(const std::string &url, const Layout &layout);

    // A reader fetching every shard of LATEST; its outcome is watched.
    // verify: th_fetch_config.verify as off, sample or all ("": the default).
    Reader start_reader(const std::string &name, const std::string &url, const Layout &layout, const ReaderSpec &spec,
                        const std::string &verify = "");

    // Reads the child's first output line on a thread, with the hung bound
    // (plus extra_ms, for a child that loops that long before it answers).
    Reader watch(Child &c, int extra_ms = 0);

    // Waits for a reader and checks what it printed. Returns whether it
    // completed with exactly the bytes of `version` (0: any version).
    bool settle(const Reader &r, uint64_t version, Outcome *out = nullptr);

    // Waits for a publish-loop to print "ready" (its loop ended); false, with
    // a violation (a crash, or a hang), if it does not within 30 s.
    // *published: the last version it published.
    bool loop_ended(Child &publisher, const std::string &who, uint64_t *published = nullptr);

    // How the child ended, waiting a little: its stdout reaches EOF just
    // before it becomes a zombie. nullopt if it still runs after that.
    static std::optional<std::string> ended_soon(const Child &c);

    // The version must still be fetchable while one of `holders` lives: a
    // fresh reader (not slowed, not serving) succeeds within `retry_ms`
    // (retries cover a standby server that learns about holders only as they
    // re-register). With no holder alive there is nothing to expect: their
    // crash is reported by finish().
    void expect_available(const std::string &url, const Layout &layout, const std::vector<Child *> &holders,
                          const std::string &context, int retry_ms = 0);

    // Waits until the worker named `name` has a read in flight per the server;
    // returns its worker id, or 0 if that did not happen within `ms`.
    uint64_t wait_serving(const std::string &server_url, const std::string &name, int ms);

    // A number the server's status gives for the worker named `name` (0 if
    // it does not know it): "worker_id", or "active_reads" (fetches planned
    // on its replicas whose end it has not heard of).
    static uint64_t worker_field(const std::string &server_url, const std::string &name, const char *field);

    void mark_fault(Clock::time_point at, const std::string &what);

    // The affected readers: in flight at the fault and, when the fault hit
    // a source (victim != 0), with a log that shows they dropped it. Any
    // affected reader means the fault was injected; the recovery of each one
    // that completed is the time from the fault to its completion. With
    // read_through, the victim had reads active at the fault that its
    // readers may finish without dropping it (a paused holder read one-sided,
    // over shared memory or RDMA, needs no CPU of its own): any reader in
    // flight then also means injected, and the fault's text says how many
    // dropped the victim.
    void measure_recovery(const std::vector<Reader> &readers, const std::vector<bool> &in_flight,
                          Clock::time_point fault, uint64_t victim, bool read_through = false);

    // Which readers are still fetching now (call it at the fault).
    static std::vector<bool> in_flight(const std::vector<Reader> &readers);

    // End of the run: every process still up must exit within 8 s of SIGTERM
    // (a stopped one is continued first); those that do not are hung. Workers
    // go first and servers last, as in an orderly shutdown: a worker whose
    // server is already gone is another fault (see README, known bugs).
    // Then any process that died on its own and was not reported yet (a
    // crash) is a violation.
    void finish();

  private:
    // Where a hung process is stuck: its threads' stacks, by gdb when there
    // is one, written next to its log. Returns a note for the violation.
    std::string capture_stacks(const Child &c);

    // The frames of each thread, shortened to the function names, so that a
    // hang reported from a machine whose files are out of reach still says
    // where each thread was.
    static std::string stack_summary(const std::string &path);

    Child &worker_from(const std::string &binary, const std::string &name, std::vector<std::string> args,
                       std::vector<std::string> env);

    // SIGTERM, then up to 8 s to exit; how they ended is judged by finish().
    void terminate(const std::vector<Child *> &up);

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
Layout random_layout(Run &run);

// Slow readers: 2-3, each 3-6 ms per chunk, none serving (so that each one
// reads from a holder we started, and a source we hit is one we chose).
std::vector<Reader> start_slow_readers(Run &run, const std::string &url, const Layout &layout, uint64_t *max_delay_us,
                                       bool serve = false);

// The moment to strike: a random point in the first half of the transfer.
void sleep_random_part_of(Run &run, int64_t transfer_ms);

// A publisher plus a complete second holder "r1" (a serving reader): the
// version survives losing either. Returns {publisher id, r1 id}.
std::pair<uint64_t, uint64_t> two_holders(Run &run, const std::string &url, const Layout &layout);

}  // namespace th_fault
