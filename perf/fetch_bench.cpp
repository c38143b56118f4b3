// tensorhub-fetch-bench: single-stream fetch throughput against the physical
// limit of the same transport.
//
// The parent starts an embedded server and two processes, a holder and a
// reader; each plays both parts of its side: tensorhub's (the holder
// publishes one shard of a few float32 tensors, the reader th_fetch()es it,
// not serving it on) and a plain-UCX pair's, which moves the same bytes
// between the same buffers with ucp_get_nbx, with the same chunk size and
// reads in flight (from as many workers, each with a thread, as the library
// posts its reads from: --copy-threads, at most one per read in flight, on
// host-memory lanes the library read one-sided, as its th_sync_stats say;
// else one), and again with reads of --raw-long-kb (64 MiB): the library
// reads several chunks at once where a chunk takes microseconds. Where the
// library pulls (tcp: UCX only emulates a GET there, copying on the target),
// the plain pair also pulls, each read asked for once and answered in eager
// pieces from registered memory (raw_ucx.hpp). The raw figure is the fastest
// of these, the lane's limit whatever the read size and method.
// The holder settles after each publish before anything is read (its
// spill pool prepares a slab for the next owned copy: 2.5 s of a core per
// GiB on the 2-vCPU VM, which otherwise ran beside the first reads).
// Same buffers, because a cma copy's cost depends on how scattered the
// pages are in physical memory: two processes' buffers, made at different
// moments, differed by up to 15% here. Repetitions of the two alternate, so
// both see the same machine noise. Destinations are faulted in before every
// timed transfer, each size is warmed up once untimed (registration,
// endpoints), and each pair's reads are verified byte for byte.
//
// Each lane is measured with fresh processes: tcp (the path between hosts,
// where tensorhub pulls with active messages), sm (shared memory and cma on
// one host, where it reads one-sided), cuda (device memory on both sides over
// cuda_ipc; measured by default where a CUDA device is present) and tcp-cuda
// (device memory, answered by the holder over tcp). The CPU time the holder
// spent while being read is reported per GiB served, for each pair: about
// zero on one-sided lanes.
//
// Checksums: the holder computes one per chunk at every publish (the
// library's default), timed and reported per GiB; tensorhub fetches use the
// default verification (a sample of chunks), and each repetition also
// fetches once with every chunk verified, reported beside it.
//
//   tensorhub-fetch-bench [--sizes-mb 64,256,1024] [--reps 5] [--chunk-kb 4096]
//                         [--raw-long-kb 65536] [--inflight 8] [--tensors 4]
//                         [--copy-threads 2] [--lanes tcp,sm[,cuda]] [--smoke]
//
// Prints a table per lane and, last, one JSON line: the largest size of each
// lane, with fetch_gbps, raw_gbps, ratio, transport, one_sided (the share
// of tensorhub's bytes read one-sided), server_ms (how long a fetch waited
// for the server: its plan and end report, th_sync_stats.server_seconds) and
// ratio_without_server (the ratio with that fixed cost left out).
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "args.hpp"
#include "bench_memory.hpp"
#include "bench_proc.hpp"
#include "bench_util.hpp"
#include "host_shard.hpp"
#include "pattern.hpp"
#include "raw_ucx.hpp"
#include "tensorhub/tensorhub.h"

using namespace th_bench;
using th_support::human_bytes;

namespace {

struct Options {
    std::vector<uint64_t> sizes_mb = {64, 256, 1024};
    unsigned reps = 5;
    uint64_t chunk_bytes = 4ull << 20;
    uint64_t raw_long_read = 64ull << 20;  // the raw pair's second read size; 0: none
    unsigned inflight = 8;
    unsigned tensors = 4;
    // th_client_config.copy_threads of the reader; the raw pair reads from
    // as many workers where the library would use them (one-sided, host memory).
    unsigned copy_threads = TH_DEFAULT_COPY_THREADS;
    // The lanes measured (see Lane): tcp, sm, and cuda where a device is.
    std::vector<std::string> lanes;
    // A child's buffers (the parent passes each lane's to its children).
    Memory memory = Memory::Host;
};

// A measured lane: the UCX transports both pairs may use, and where their
// buffers live. Any other name is taken as a UCX_TLS value over host memory.
struct Lane {
    std::string name;
    std::string tls;
    Memory memory = Memory::Host;
};

Lane lane_named(const std::string &name) {
    if (name == "cuda") return {name, "sm,cuda_copy,cuda_ipc", Memory::Cuda};
    if (name == "tcp-cuda") return {name, "tcp,cuda_copy", Memory::Cuda};
    return {name, name, Memory::Host};
}

// How long one command may take (a fill, a transfer, a verification) before
// it counts as hung: generous, since the machine may be slow and noisy.
// Slower than 10 MB/s means something is stuck, not slow.
Millis budget(uint64_t bytes) { return Millis(30000 + bytes / 10'000); }

constexpr Millis kIdleLimit{30 * 60 * 1000};  // a child waiting for its next command

void check(th_status st, const char *what) {
    if (st != TH_OK) fail(what, ": ", th_status_str(st), ": ", th_last_error());
}

// ---------------------------------------------------------------------------
// Shards: the tensors published and fetched.

// One mapping (or device allocation) holding every tensor back to back: the
// raw pair reads the same pages as tensorhub, so both see the same physical
// layout (how scattered the pages are changes what a cma copy costs).
struct Shard {
    Buffer memory;
    uint64_t per = 0;  // bytes per tensor
    std::vector<std::string> names;
    std::vector<th_tensor> views;

    Shard(uint64_t bytes, unsigned tensors, Memory m) : memory(bytes / tensors * tensors, m), per(bytes / tensors) {
        for (unsigned t = 0; t < tensors; ++t) names.push_back("layers." + std::to_string(t) + ".weight");
        for (unsigned t = 0; t < tensors; ++t) {
            views.push_back(th_support::host_tensor(names[t].c_str(), TH_DTYPE_FLOAT32, memory.data() + t * per, per));
            views.back().mem_kind = memory.kind();
        }
    }
    // Tensor t of a version holds pattern_seed(version, 0, t).
    void fill(uint64_t version) {
        for (unsigned t = 0; t < views.size(); ++t) memory.fill(th_support::pattern_seed(version, 0, t), t * per, per);
    }
    void verify(uint64_t version, const char *after) const {
        for (unsigned t = 0; t < views.size(); ++t) {
            size_t bad = memory.check(th_support::pattern_seed(version, 0, t), t * per, per);
            if (bad != per) fail("after ", after, ": version ", version, " tensor ", t, ": wrong byte at offset ", bad);
        }
    }
    void clear() { memory.clear(); }
};

// ---------------------------------------------------------------------------
// Child roles. Each is a command loop (see bench_proc.hpp). A child plays
// both parts of its side: tensorhub's and the raw pair's, over the same
// buffers.

th_client *connect(const std::string &url, const std::string &name, const Options &o) {
    th_client_config cfg;
    th_client_config_init(&cfg, sizeof cfg);
    cfg.server_url = url.c_str();
    cfg.worker_name = name.c_str();
    cfg.max_inflight = o.inflight;
    cfg.copy_threads = o.copy_threads;
    th_client *c = nullptr;
    check(th_client_create(&c, &cfg), "connecting to the server");
    return c;
}

// address -> HEX | publish MODEL VERSION BYTES -> SECONDS REMOTE RKEY CONTIGUOUS | release
int run_holder(const std::string &url, const Options &o) {
    std::unique_ptr<th_client, decltype(&th_client_destroy)> client(connect(url, "bench-publisher", o), th_client_destroy);
    RawTarget target;
    std::unique_ptr<Shard> shard;
    th_replica *replica = nullptr;
    auto release = [&] {
        target.unexpose();
        th_status st = th_replica_release(replica);
        replica = nullptr;
        shard.reset();
        check(st, "releasing the replica");
        return std::string();
    };
    std::map<std::string, Handler> handlers = {
        {"address",
         [&](const std::vector<std::string> &) {
             auto a = target.address();
             return to_hex(a.data(), a.size());
         }},
        {"publish",
         [&](const std::vector<std::string> &a) {
             if (replica) release();
             uint64_t version = to_u64(a.at(1));
             shard = std::make_unique<Shard>(to_u64(a.at(2)), o.tensors, o.memory);
             shard->fill(version);
             th_publish_config pc;
             th_publish_config_init(&pc, sizeof pc);
             pc.model = a.at(0).c_str();
             pc.version = version;
             pc.chunk_bytes = o.chunk_bytes;
             auto t0 = Clock::now();
             check(th_publish(client.get(), &pc, shard->views.data(), shard->views.size(), &replica), "publishing");
             double secs = std::chrono::duration<double>(Clock::now() - t0).count();
             auto rkey = target.expose(shard->memory);
             return str(secs, " ", reinterpret_cast<uintptr_t>(shard->memory.data()), " ", to_hex(rkey.data(), rkey.size()),
                        " ", shard->memory.physically_contiguous());
         }},
        {"release", [&](const std::vector<std::string> &) { return release(); }},
    };
    int rc = serve("holder", handlers, kIdleLimit);
    target.unexpose();
    th_replica_release(replica);
    return rc;
}

// connect HEX -> TRANSPORTS | prepare BYTES REMOTE RKEY -> CONTIGUOUS | clear |
// fetch MODEL VERSION [all|off] -> SECONDS ONE_SIDED_BYTES SERVER_SECONDS | get READ_BYTES -> SECONDS |
// pull READ_BYTES -> SECONDS |
// verify VERSION AFTER | drop
int run_reader(const std::string &url, const Options &o) {
    std::unique_ptr<th_client, decltype(&th_client_destroy)> client(connect(url, "bench-reader", o), th_client_destroy);
    RawReader raw;
    std::unique_ptr<Shard> shard;
    auto need = [&] {
        if (!shard) fail("no buffers prepared");
        return shard.get();
    };
    std::map<std::string, Handler> handlers = {
        {"connect",
         [&](const std::vector<std::string> &a) {
             raw.connect(from_hex(a.at(0)));
             return raw.transports();
         }},
        {"widen",
         [&](const std::vector<std::string> &a) {
             raw.widen(static_cast<unsigned>(to_u64(a.at(0))));
             return str(raw.workers());
         }},
        {"prepare",
         [&](const std::vector<std::string> &a) {
             raw.unbind();
             shard = std::make_unique<Shard>(to_u64(a.at(0)), o.tensors, o.memory);
             shard->clear();
             raw.bind(to_u64(a.at(1)), from_hex(a.at(2)), shard->memory);
             return str(shard->memory.physically_contiguous());
         }},
        // Apart from the reads, so that the CPU time around a read is the
        // read's.
        {"clear",
         [&](const std::vector<std::string> &) {
             need()->clear();
             return std::string();
         }},
        {"fetch",
         [&](const std::vector<std::string> &a) {
             Shard *s = need();
             th_fetch_config fc;
             th_fetch_config_init(&fc, sizeof fc);
             fc.model = a.at(0).c_str();
             fc.version = to_u64(a.at(1));
             fc.timeout_ms = static_cast<uint32_t>(budget(s->memory.size()).count());
             if (a.size() > 2 && a[2] == "all") fc.verify = TH_VERIFY_ALL;
             if (a.size() > 2 && a[2] == "off") fc.verify = TH_VERIFY_OFF;
             th_sync_stats stats;
             th_sync_stats_init(&stats, sizeof stats);
             fc.stats = &stats;
             uint64_t got = 0;
             auto t0 = Clock::now();
             // NULL out_replica: the reader only reads, it does not serve.
             check(th_fetch(client.get(), &fc, s->views.data(), s->views.size(), &got, nullptr), "fetching");
             double secs = std::chrono::duration<double>(Clock::now() - t0).count();
             if (got != fc.version) fail("asked for version ", fc.version, ", got ", got);
             return str(secs, " ", stats.bytes_one_sided, " ", stats.server_seconds);
         }},
        {"get",
         [&](const std::vector<std::string> &a) {
             Shard *s = need();
             return str(raw.read_all(to_u64(a.at(0)), o.inflight, Clock::now() + budget(s->memory.size())));
         }},
        {"pull",
         [&](const std::vector<std::string> &a) {
             Shard *s = need();
             return str(raw.pull_all(to_u64(a.at(0)), o.inflight, Clock::now() + budget(s->memory.size())));
         }},
        {"verify",
         [&](const std::vector<std::string> &a) {
             need()->verify(to_u64(a.at(0)), a.at(1).c_str());
             return std::string();
         }},
        {"drop",
         [&](const std::vector<std::string> &) {
             raw.unbind();
             shard.reset();
             return std::string();
         }},
    };
    int rc = serve("reader", handlers, kIdleLimit);
    raw.unbind();  // its registration goes before the memory does
    shard.reset();
    return rc;
}

// ---------------------------------------------------------------------------
// The parent.

struct Result {
    uint64_t size_mb = 0;  // as asked for
    uint64_t bytes = 0;    // as moved: whole float32 elements per tensor
    std::string transport;  // the lane's name (Lane)
    Memory memory = Memory::Host;
    std::vector<double> fetch_gbps;
    // Of each default fetch, the seconds it waited for the server (the plan,
    // the end report: th_sync_stats.server_seconds), and its rate without them.
    std::vector<double> server_s, fetch_without_server_gbps;
    // The plain-UCX pair, one entry per way it read: GETs of a chunk first,
    // then of --raw-long-kb where longer, then pulls of a chunk where the
    // library pulled. CPU times over the timed repetitions.
    struct Raw {
        const char *method = "get";  // or "pull"
        uint64_t read = 0;           // bytes per read
        std::vector<double> gbps;
        double target_cpu_s = 0, reader_cpu_s = 0;
    };
    std::vector<Raw> raws;
    std::vector<double> verify_all_gbps;  // tensorhub, every chunk checked
    std::vector<double> verify_off_gbps;  // tensorhub, no chunk checked
    double publish_s = 0;                 // the publish, checksums included
    double holder_cpu_s = 0, reader_cpu_s = 0;  // of the default fetches, over the timed repetitions
    uint64_t served = 0;                             // bytes the timed repetitions moved per pair
    // Buffer::physically_contiguous() of the holder's and the reader's
    // buffers (both pairs use them): -1 unknown.
    double holder_contiguous = -1, reader_contiguous = -1;
    unsigned raw_workers = 1;  // the raw pair's reading workers (threads)
    double one_sided = 0;      // share of tensorhub's bytes read one-sided (th_sync_stats.bytes_one_sided)
    double per_gib(double cpu_s) const { return served ? cpu_s / (double(served) / (1ull << 30)) : 0; }
    double holder_cpu_per_gib() const { return per_gib(holder_cpu_s); }
    double raw_target_cpu_per_gib() const { return per_gib(best().target_cpu_s); }
    double raw_reader_cpu_per_gib() const { return per_gib(best().reader_cpu_s); }
    double fetch() const { return median(fetch_gbps); }
    // The lane's limit: the raw pair's fastest way of reading (method, read size).
    const Raw &best() const {
        static const Raw none;
        const Raw *b = raws.empty() ? &none : &raws.front();
        for (const Raw &w : raws)
            if (median(w.gbps) > median(b->gbps)) b = &w;
        return *b;
    }
    double raw() const { return median(best().gbps); }
    // What the pair did fastest, e.g. "4.0 MiB" (GETs) or "pull 4.0 MiB".
    std::string raw_read() const {
        const Raw &b = best();
        return (std::string(b.method) == "get" ? "" : std::string(b.method) + " ") + human_bytes(double(b.read));
    }
    double ratio() const { return raw() > 0 ? fetch() / raw() : 0; }
    // What the fetch's reads alone reach: the fixed cost of its round trips
    // to the server left out (they do not grow with the shard).
    double ratio_without_server() const { return raw() > 0 ? median(fetch_without_server_gbps) / raw() : 0; }
    double server_ms() const { return 1e3 * median(server_s); }
    // The median of each repetition's ratio to the raw pair measured right
    // after it: the machine's speed drifts over a run (a VM's neighbours),
    // and a pair measured together drifts together.
    double paired_ratio() const {
        const std::vector<double> &raw_runs = best().gbps;
        std::vector<double> ratios;
        for (size_t i = 0; i < fetch_gbps.size() && i < raw_runs.size(); ++i)
            if (raw_runs[i] > 0) ratios.push_back(fetch_gbps[i] / raw_runs[i]);
        return ratios.empty() ? 0 : median(ratios);
    }
    double verify_all() const { return median(verify_all_gbps); }
    double verify_off() const { return median(verify_off_gbps); }
    double publish_per_gib() const { return bytes ? publish_s / (double(bytes) / (1ull << 30)) : 0; }
};

// Waits until c uses less than a tenth of a core (over 0.2 s), at most 30 s:
// a holder's work after a publish (its spill pool faulting in a slab for the
// next owned copy, seconds per GiB on some VMs) would otherwise compete with
// the first timed reads and count as CPU spent serving them.
void settle(Child &c) {
    auto until = Clock::now() + std::chrono::seconds(30);
    double before = c.cpu_seconds();
    while (Clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        double now = c.cpu_seconds();
        if (now - before < 0.02) return;
        before = now;
    }
}

class Bench {
  public:
    Bench(const std::string &url, const Options &o, Memory memory) : o_(o), memory_(memory) {
        std::vector<std::string> common = {"tensorhub-fetch-bench", "--server", url,
                                           "--chunk-kb", std::to_string(o.chunk_bytes >> 10),
                                           "--inflight", std::to_string(o.inflight),
                                           "--copy-threads", std::to_string(o.copy_threads),
                                           "--tensors", std::to_string(o.tensors),
                                           "--memory", memory_name(memory)};
        auto start = [&](const char *role) {
            auto args = common;
            args.insert(args.end(), {"--role", role});
            return std::make_unique<Child>(role, args);
        };
        holder_ = start("holder");
        reader_ = start("reader");
        auto address = holder_->call("address", Millis(30000));
        transports_ = reader_->call("connect " + address.at(0), Millis(30000)).at(0);
    }

    unsigned raw_workers() const { return raw_workers_; }

    // What the raw endpoint runs over (tensorhub's endpoints get the same).
    const std::string &transports() const { return transports_; }

    Result measure(uint64_t size_mb, uint64_t index) {
        Result r;
        r.size_mb = size_mb;
        r.bytes = (size_mb << 20) / (4ull * o_.tensors) * (4ull * o_.tensors);
        const uint64_t bytes = r.bytes;
        Millis limit = budget(bytes) + Millis(10000);  // the child's own deadline fires first
        std::string model = "bench-" + std::to_string(bytes >> 10) + "k";
        std::string version = std::to_string(index + 1);
        auto published = holder_->call(str("publish ", model, " ", version, " ", bytes), limit);
        settle(*holder_);
        r.publish_s = seconds(published);
        r.holder_contiguous = std::stod(published.at(3));
        r.reader_contiguous = std::stod(reader_->call(str("prepare ", bytes, " ", published.at(1), " ", published.at(2)),
                                                      limit).at(0));

        // Each read starts from zeroed buffers, cleared outside the timed
        // call and outside the reader's CPU time (added to *cpu if given).
        // The reply starts with the read's seconds.
        auto read_once = [&](const std::string &command, double *cpu) {
            reader_->call("clear", limit);
            double cpu0 = reader_->cpu_seconds();
            auto reply = reader_->call(command, limit);
            if (cpu) *cpu += reader_->cpu_seconds() - cpu0;
            return reply;
        };
        auto fetch_reply = [&](const char *verify = "", double *cpu = nullptr) {
            return read_once(str("fetch ", model, " ", version, " ", verify), cpu);
        };
        auto fetch_once = [&](const char *verify = "", double *cpu = nullptr) { return seconds(fetch_reply(verify, cpu)); };
        auto raw_once = [&](const Result::Raw &w, double *cpu = nullptr) {
            return seconds(read_once(str(w.method, " ", w.read), cpu));
        };
        auto verify = [&](const char *after) { reader_->call(str("verify ", version, " ", after), limit); };
        r.raws.push_back({"get", o_.chunk_bytes, {}, 0, 0});
        // No longer than the buffer: a smaller shard is one GET of it all.
        if (std::min(o_.raw_long_read, bytes) > o_.chunk_bytes)
            r.raws.push_back({"get", std::min(o_.raw_long_read, bytes), {}, 0, 0});
        // Warm-up (registration, endpoints, rkeys), each pair checked once.
        // The library says how much of it it read one-sided (th_sync_stats).
        r.one_sided = double(to_u64(fetch_reply().at(1))) / double(bytes);
        verify("a-fetch");
        // It posts one-sided reads into host memory from up to copy_threads
        // threads, as many as it has reads in flight: where it read one-sided,
        // the raw pair reads from as many workers (from the first size on).
        const unsigned threads = std::min(o_.copy_threads, o_.inflight);
        if (r.one_sided == 1 && memory_ == Memory::Host && raw_workers_ < threads)
            raw_workers_ = static_cast<unsigned>(std::stoul(reader_->call(str("widen ", threads), limit).at(0)));
        // Where the library pulled, the plain pair pulls too (host memory).
        if (r.one_sided == 0 && memory_ == Memory::Host) r.raws.push_back({"pull", o_.chunk_bytes, {}, 0, 0});
        for (const Result::Raw &w : r.raws) {
            raw_once(w);
            verify(w.method == std::string("get") ? "a-raw-read" : "a-raw-pull");
        }
        for (unsigned rep = 0; rep < o_.reps; ++rep) {
            double holder0 = holder_->cpu_seconds();
            auto fetched = fetch_reply("", &r.reader_cpu_s);
            double secs = seconds(fetched), server = std::stod(fetched.at(2));
            r.fetch_gbps.push_back(bytes / secs / 1e9);
            r.server_s.push_back(server);
            if (secs > server) r.fetch_without_server_gbps.push_back(bytes / (secs - server) / 1e9);
            // One holder process serves both pairs: the end of one span is
            // the start of the next.
            double target0 = holder_->cpu_seconds();
            r.holder_cpu_s += target0 - holder0;
            for (Result::Raw &w : r.raws) {
                w.gbps.push_back(bytes / raw_once(w, &w.reader_cpu_s) / 1e9);
                double target1 = holder_->cpu_seconds();
                w.target_cpu_s += target1 - target0;
                target0 = target1;
            }
            r.served += bytes;
            r.verify_all_gbps.push_back(bytes / fetch_once("all") / 1e9);
            r.verify_off_gbps.push_back(bytes / fetch_once("off") / 1e9);
        }
        verify("a-fetch-verifying-nothing");

        reader_->call("drop", limit);
        holder_->call("release", limit);
        return r;
    }

    // The reader first: its endpoints close while the holder still answers.
    void finish() {
        for (Child *c : {reader_.get(), holder_.get()}) c->finish(Millis(30000));
    }

  private:
    static double seconds(const std::vector<std::string> &reply) {
        double s = std::stod(reply.at(0));
        if (!(s > 0)) fail("a transfer reported ", s, " seconds");
        return s;
    }

    Options o_;
    Memory memory_;
    std::string transports_;
    unsigned raw_workers_ = 1;
    std::unique_ptr<Child> holder_, reader_;
};

std::string range(const std::vector<double> &v) {
    auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    return str(std::fixed, std::setprecision(2), *lo, "-", *hi);
}

// The host's default tcp congestion control: it decides the tcp lane's
// figures on one host (with bbr the kernel paces loopback sends with timers
// that the sender pays for, perf/FETCH.md), so results say which it was.
std::string tcp_congestion_control() {
    std::ifstream f("/proc/sys/net/ipv4/tcp_congestion_control");
    std::string name;
    return f >> name ? name : std::string("unknown");
}

// After the lane's first size: by then the library said how it read the lane.
void print_header(const Options &o, const Lane &lane, const std::string &transports, const Result &first) {
    auto env = [](const char *name) {
        const char *v = std::getenv(name);
        return std::string(v ? v : "(UCX default)");
    };
    std::printf("tensorhub %s fetch benchmark: 1 publisher -> 1 reader, %u tensors per shard, chunk %s, %u reads in flight, "
                "median of %u\n",
                th_version(), o.tensors, human_bytes(double(o.chunk_bytes)).c_str(), o.inflight, o.reps);
    std::printf("lane %s: %s memory, transport %s; UCX_TLS=%s UCX_TCP_TX_SEG_SIZE=%s UCX_TCP_RX_SEG_SIZE=%s\n",
                lane.name.c_str(), memory_name(lane.memory), transports.c_str(), env("UCX_TLS").c_str(),
                env("UCX_TCP_TX_SEG_SIZE").c_str(), env("UCX_TCP_RX_SEG_SIZE").c_str());
    std::printf("tensorhub read %.0f%% one-sided; reader copy threads %u; the raw pair reads from %u worker(s), each with a "
                "thread\n", 100 * first.one_sided, o.copy_threads, first.raw_workers);
    if (transports.find("tcp") != std::string::npos)
        std::printf("host tcp congestion control: %s\n", tcp_congestion_control().c_str());
    std::printf("%10s %15s %10s %14s %7s %7s %10s %14s   %-17s %-17s %-22s %14s %14s %18s   %-22s   %s\n", "size",
                "tensorhub GB/s", "raw GB/s", "raw read", "ratio", "paired", "server ms", "ratio - server",
                "tensorhub min-max", "raw min-max", "holder CPU s/GiB (raw)", "verify-all GB/s", "verify-off GB/s",
                "publish s/GiB", "reader CPU s/GiB (raw)", "pages contiguous (holder, reader)");
    std::fflush(stdout);
}

void print_row(const Result &r) {
    std::string cpu = str(std::fixed, std::setprecision(3), r.holder_cpu_per_gib(), " (", r.raw_target_cpu_per_gib(), ")");
    std::string reader = str(std::fixed, std::setprecision(3), r.per_gib(r.reader_cpu_s), " (", r.raw_reader_cpu_per_gib(), ")");
    auto share = [](double f) { return f < 0 ? std::string("-") : str(std::fixed, std::setprecision(0), 100 * f, "%"); };
    std::string pages = share(r.holder_contiguous) + ", " + share(r.reader_contiguous);
    std::printf("%10s %15.2f %10.2f %14s %7.3f %7.3f %10.3f %14.3f   %-17s %-17s %-22s %14.2f %14.2f %18.3f   %-22s   %s\n",
                human_bytes(double(r.bytes)).c_str(), r.fetch(), r.raw(), r.raw_read().c_str(), r.ratio(),
                r.paired_ratio(), r.server_ms(), r.ratio_without_server(), range(r.fetch_gbps).c_str(),
                range(r.best().gbps).c_str(),
                cpu.c_str(), r.verify_all(), r.verify_off(), r.publish_per_gib(), reader.c_str(), pages.c_str());
    std::fflush(stdout);
}

std::string json_fields(const Result &r) {
    // GETs of a chunk come first; pulls, where measured, last.
    double pull = !r.raws.empty() && r.raws.back().method == std::string("pull") ? median(r.raws.back().gbps) : 0;
    char buf[1200];
    std::snprintf(buf, sizeof buf,
                  "\"transport\":\"%s\",\"memory\":\"%s\",\"size_mb\":%llu,\"fetch_gbps\":%.3f,\"raw_gbps\":%.3f,"
                  "\"raw_method\":\"%s\",\"raw_read_kb\":%llu,\"raw_chunk_read_gbps\":%.3f,\"raw_pull_gbps\":%.3f,"
                  "\"ratio\":%.3f,\"ratio_paired\":%.3f,"
                  "\"holder_cpu_s_per_gib\":%.4f,\"raw_target_cpu_s_per_gib\":%.4f,\"fetch_verify_all_gbps\":%.3f,"
                  "\"fetch_verify_off_gbps\":%.3f,\"publish_checksums_s_per_gib\":%.4f,"
                  "\"reader_cpu_s_per_gib\":%.4f,\"raw_reader_cpu_s_per_gib\":%.4f,"
                  "\"holder_pages_contiguous\":%.3f,\"reader_pages_contiguous\":%.3f,\"raw_workers\":%u,"
                  "\"one_sided\":%.3f,\"server_ms\":%.3f,\"ratio_without_server\":%.3f",
                  r.transport.c_str(), memory_name(r.memory), static_cast<unsigned long long>(r.size_mb), r.fetch(), r.raw(),
                  r.best().method, static_cast<unsigned long long>(r.best().read >> 10),
                  r.raws.empty() ? 0.0 : median(r.raws.front().gbps), pull, r.ratio(), r.paired_ratio(),
                  r.holder_cpu_per_gib(), r.raw_target_cpu_per_gib(), r.verify_all(), r.verify_off(),
                  r.publish_per_gib(), r.per_gib(r.reader_cpu_s), r.raw_reader_cpu_per_gib(), r.holder_contiguous,
                  r.reader_contiguous, r.raw_workers, r.one_sided, r.server_ms(), r.ratio_without_server());
    return buf;
}

// One line: the largest size of the last lane at top level, every lane's
// largest size under "lanes", and how much faster shared memory was than tcp.
void print_json(const std::vector<Result> &largest) {
    std::string lanes;
    double tcp = 0, sm = 0;
    for (const Result &r : largest) {
        lanes += (lanes.empty() ? "{" : ",{") + json_fields(r) + "}";
        if (r.transport == "tcp") tcp = r.fetch();
        if (r.transport == "sm") sm = r.fetch();
    }
    std::string extra = tcp > 0 && sm > 0 ? str(",\"sm_over_tcp\":", sm / tcp) : std::string();
    std::printf("{\"bench\":\"fetch\",%s,\"lanes\":[%s]%s,\"tcp_congestion_control\":\"%s\"}\n",
                json_fields(largest.back()).c_str(), lanes.c_str(), extra.c_str(), tcp_congestion_control().c_str());
    std::fflush(stdout);
}

// Sets (or clears) the UCX settings of the lane's transports, except those
// the user set before the benchmark started.
void lane_env(const std::string &tls) {
    static const std::map<std::string, std::string> user = [] {
        std::map<std::string, std::string> m;
        for (const char *name : {"UCX_TCP_TX_SEG_SIZE", "UCX_TCP_RX_SEG_SIZE", "UCX_POSIX_ERROR_HANDLING",
                                 "UCX_SYSV_ERROR_HANDLING", "UCX_CMA_MEMORY_INVALIDATE", "UCX_MEMTYPE_REG_WHOLE_ALLOC_TYPES",
                                 "UCX_CUDA_IPC_ENABLE_GET_ZCOPY"})
            if (const char *v = std::getenv(name)) m[name] = v;
        return m;
    }();
    bool tcp = tls.find("tcp") != std::string::npos || tls == "all";
    bool sm = tls.find("sm") != std::string::npos || tls == "all";
    auto set = [&](const char *name, const char *value, bool used) {
        if (user.count(name)) return;
        if (used)
            setenv(name, value, 1);
        else
            unsetenv(name);
    };
    set("UCX_TCP_TX_SEG_SIZE", "64K", tcp);
    set("UCX_TCP_RX_SEG_SIZE", "256K", tcp);
    set("UCX_POSIX_ERROR_HANDLING", "y", sm);
    set("UCX_SYSV_ERROR_HANDLING", "y", sm);
    set("UCX_CMA_MEMORY_INVALIDATE", "y", sm);
    set("UCX_MEMTYPE_REG_WHOLE_ALLOC_TYPES", "", true);
    set("UCX_CUDA_IPC_ENABLE_GET_ZCOPY", "y", tls.find("cuda_ipc") != std::string::npos);
}

int run_parent(const Options &o) {
    signal(SIGPIPE, SIG_IGN);  // a dead child shows as EPIPE, reported with its name
    th_server_config sc;
    th_server_config_init(&sc, sizeof sc);
    th_server *raw_server = nullptr;
    check(th_server_create(&raw_server, &sc), "starting the embedded server");
    std::unique_ptr<th_server, decltype(&th_server_destroy)> server(raw_server, th_server_destroy);
    std::vector<Result> largest;
    uint64_t index = 0;
    std::vector<std::string> names = o.lanes;
    if (names.empty()) names = cuda_usable() ? std::vector<std::string>{"tcp", "sm", "cuda"} : std::vector<std::string>{"tcp", "sm"};
    for (const std::string &name : names) {
        Lane lane = lane_named(name);
        if (lane.memory == Memory::Cuda && !cuda_usable())
            fail("lane ", name, " reads CUDA device memory, and no CUDA device is usable here");
        // The children inherit the lane; each pair runs over it alone, with
        // the settings libtensorhub applies to its own contexts
        // (src/transport/ucx_env.cpp) given to the raw pair as well, but only
        // those the lane uses (UCX warns, on stdout, of unused ones).
        setenv("UCX_TLS", lane.tls.c_str(), 1);
        lane_env(lane.tls);
        // Children are killed by Bench's destructor if anything below fails.
        Bench bench(th_server_url(server.get()), o, lane.memory);
        std::vector<Result> results;
        for (uint64_t mb : o.sizes_mb) {
            results.push_back(bench.measure(mb, index++));
            results.back().transport = lane.name;
            results.back().memory = lane.memory;
            results.back().raw_workers = bench.raw_workers();
            if (results.size() == 1) print_header(o, lane, bench.transports(), results.front());
            print_row(results.back());
        }
        bench.finish();
        largest.push_back(*std::max_element(results.begin(), results.end(),
                                            [](const Result &a, const Result &b) { return a.bytes < b.bytes; }));
    }
    print_json(largest);
    return 0;
}

Options parse(const th_support::Args &args) {
    Options o;
    bool smoke = args.has("smoke");
    if (smoke) {
        // Tiny, but several chunks per shard so the GET window is exercised.
        o.sizes_mb = {1, 4};
        o.reps = 1;
        o.chunk_bytes = 256ull << 10;
    }
    if (args.has("sizes-mb")) {
        o.sizes_mb.clear();
        for (const auto &s : split(args.get("sizes-mb"), ',')) o.sizes_mb.push_back(to_u64(s));
    }
    o.reps = static_cast<unsigned>(args.get_u64("reps", o.reps));
    o.chunk_bytes = args.get_u64("chunk-kb", o.chunk_bytes >> 10) << 10;
    o.raw_long_read = args.get_u64("raw-long-kb", o.raw_long_read >> 10) << 10;
    o.inflight = static_cast<unsigned>(args.get_u64("inflight", o.inflight));
    o.tensors = static_cast<unsigned>(args.get_u64("tensors", o.tensors));
    o.copy_threads = static_cast<unsigned>(args.get_u64("copy-threads", o.copy_threads));
    if (args.has("lanes")) o.lanes = split(args.get("lanes"), ',');
    std::string memory = args.get("memory");
    if (memory == "cuda")
        o.memory = Memory::Cuda;
    else if (!memory.empty() && memory != "host")
        fail("--memory must be host or cuda");
    if (o.sizes_mb.empty() || o.reps < 1 || o.chunk_bytes == 0 || o.inflight < 1 || o.tensors < 1 ||
        o.copy_threads < 1)
        fail("--sizes-mb, --reps, --chunk-kb, --inflight, --tensors and --copy-threads must be positive");
    for (uint64_t mb : o.sizes_mb)
        if (mb == 0 || (mb << 20) < 4ull * o.tensors) fail("size ", mb, " MiB is too small for ", o.tensors, " tensors");
    return o;
}

}  // namespace

int main(int argc, char **argv) {
    try {
        th_support::Args args(argc, argv, {"help", "smoke"});
        if (args.has("help")) {
            std::printf("usage: tensorhub-fetch-bench [--sizes-mb 64,256,1024] [--reps 5] [--chunk-kb 4096] "
                        "[--raw-long-kb 65536 (0: none)] [--inflight 8] [--tensors 4] [--copy-threads 2] [--lanes tcp,sm[,cuda]] [--smoke]\n"
                        "lanes: tcp, sm, cuda (device memory over cuda_ipc; default where a CUDA device is),\n"
                        "tcp-cuda (device memory over tcp), or any other UCX_TLS value over host memory\n");
            return 0;
        }
        auto bad = args.unknown({"sizes-mb", "reps", "chunk-kb", "raw-long-kb", "inflight", "tensors", "copy-threads", "lanes", "smoke", "role", "server", "memory"});
        if (!bad.empty()) fail("unknown option --", bad[0], " (see --help)");
        Options o = parse(args);
        ensure_std_fds();
        std::string role = args.get("role");
        if (role.empty()) return run_parent(o);
        if (role == "holder") return run_holder(args.get("server"), o);
        if (role == "reader") return run_reader(args.get("server"), o);
        fail("unknown role '", role, "'");
    } catch (const std::exception &e) {
        std::fprintf(stderr, "tensorhub-fetch-bench: %s\n", e.what());
        return 1;
    }
}
