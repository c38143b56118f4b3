// tensorhub-server-load: the metadata server under load, next to the
// transport's ceiling.
//
// A child process (pinned to its own CPUs) runs a real th::Server per worker
// count and a bare echo server: the same RpcServer (same sockets, same
// threads) whose handler only returns a reply of the size the real
// server gives to a request of that size. The parent (pinned to the other
// CPUs) simulates the workers, with no data plane: it registers W workers
// (Hello), publishes one shard and lets every other worker take a replica of
// it with the requests the client sends when it serves a fetched copy
// (PlanFetch with its replica, FetchDone), so the shard has W holders. Then,
// from T client threads (own connection and context each, one request in
// flight), a mix of PlanFetch, Resolve and Progress (and, if asked,
// Heartbeat) from random workers, as fast as the server answers, for a fixed
// time; the echo server is driven by the same threads with the same request
// bytes. Echo and servers alternate
// per repetition, so they share the machine's noise. Every reply is checked.
//
//   tensorhub-server-load [--workers 1000,10000] [--threads 8] [--seconds 1.5]
//                         [--reps 9] [--mix 1,1,1,0] [--tensors 16] [--labels racks|none]
//                         [--server-cpus 0] [--client-cpus 1] [--markdown] [--smoke]
//
// Then, one request at a time, the round trip of the client library's
// request path (th::RpcClient) to the echo server, back to back and after
// 5 ms idle (as a fetch's plan and end report come), next to a plain TCP
// ping-pong of the same bytes between the same two processes: a thread
// blocked in read() at each end, the floor of any control path on this
// machine.
//
// Prints a table (and a markdown table with --markdown) and, last, one JSON
// line. Exits non-zero when any request failed or got a wrong reply.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <iomanip>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

#include "args.hpp"
#include "bench_proc.hpp"
#include "bench_util.hpp"
#include "control/rpc.hpp"
#include "driver.hpp"
#include "requests.hpp"
#include "server/server.hpp"

using namespace th_bench;
using namespace th_load;

namespace {

constexpr Millis kCommandLimit{120000};
// Round trips: request bytes (about a PlanFetch's) and the idle gaps before each.
constexpr size_t kPingBytes = 256;
const unsigned kIdleGapsUs[] = {0, 5000};
constexpr Millis kIdleLimit{60 * 60 * 1000};
const Kind kMeasured[] = {Kind::Plan, Kind::Resolve, Kind::Progress, Kind::Heartbeat};

struct Options {
    std::vector<uint64_t> workers = {1000, 10000};
    unsigned threads = 8;
    double seconds = 1.5;  // short, many repetitions: echo and servers share the noise
    unsigned reps = 9;
    std::vector<uint64_t> mix = {1, 1, 1, 0};  // plan, resolve, progress, heartbeat
    uint32_t tensors = 16;
    bool topology = true;  // --labels racks (default) or none
    std::string server_cpus, client_cpus;  // "" = decide; "none" = do not pin
    bool markdown = false;
    bool smoke = false;
};

std::vector<int> parse_cpus(const std::string &list) {
    std::vector<int> out;
    for (const auto &part : split(list, ',')) {
        auto dash = part.find('-');
        int lo = int(to_u64(part.substr(0, dash))), hi = dash == std::string::npos ? lo : int(to_u64(part.substr(dash + 1)));
        for (int c = lo; c <= hi; ++c) out.push_back(c);
    }
    return out;
}

void pin(const std::string &list, const char *who) {
    if (list.empty() || list == "none") return;
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : parse_cpus(list)) CPU_SET(c, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) fail("cannot pin the ", who, " to CPUs ", list);
}

// By default the server gets the first half of the CPUs and the clients the
// rest; on one CPU nothing is pinned.
void default_split(Options &o) {
    unsigned n = std::thread::hardware_concurrency();
    auto range = [](unsigned lo, unsigned hi) { return lo == hi ? str(lo) : str(lo, "-", hi); };
    if (o.server_cpus.empty()) o.server_cpus = n >= 2 ? range(0, n / 2 - 1) : "none";
    if (o.client_cpus.empty()) o.client_cpus = n >= 2 ? range(n / 2, n - 1) : "none";
}

// Plain TCP on loopback, for the ping-pong (port 0: any).
sockaddr_in loopback(uint16_t port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    return a;
}

int listen_tcp() {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = loopback(0);
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0 || listen(fd, 1) != 0)
        fail("cannot listen for the tcp ping-pong");
    return fd;
}

int bound_port(int fd) {
    sockaddr_in a{};
    socklen_t n = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr *>(&a), &n);
    return ntohs(a.sin_port);
}

void no_delay(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Sends or receives one whole kPingBytes message; false once the peer is gone.
bool exchange(int fd, char *buf, bool send) {
    for (size_t done = 0; done < kPingBytes;) {
        ssize_t n = send ? write(fd, buf + done, kPingBytes - done) : read(fd, buf + done, kPingBytes - done);
        if (n <= 0) return false;
        done += size_t(n);
    }
    return true;
}

// ---------------------------------------------------------------------------
// The server process.

int run_servers(const Options &o) {
    pin(o.server_cpus, "server");
    std::vector<std::unique_ptr<th::Server>> servers;
    std::unique_ptr<th::RpcServer> echo;
    // Request size -> reply size, set once before any echo traffic.
    std::unordered_map<size_t, size_t> reply_sizes;
    std::atomic<bool> sized{false};
    auto echo_reply = [&](const uint8_t *data, size_t size) {
        size_t n = size;
        if (sized.load(std::memory_order_acquire))
            if (auto it = reply_sizes.find(size); it != reply_sizes.end()) n = it->second;
        th::wire::Bytes out(n);
        std::copy(data, data + std::min(n, size), out.begin());
        return out;
    };
    std::map<std::string, Handler> handlers;
    handlers["start"] = [&](const std::vector<std::string> &args) {
        echo = std::make_unique<th::RpcServer>("tcp://127.0.0.1:0", echo_reply);
        std::string urls = echo->url();
        for (size_t i = 0; i < args.size(); ++i) {
            th::ServiceConfig cfg;
            cfg.lease_ms = 24 * 3600 * 1000;  // simulated workers send no heartbeats
            servers.push_back(std::make_unique<th::Server>("tcp://127.0.0.1:0", cfg));
            urls += " " + servers.back()->url();
        }
        return urls;
    };
    handlers["sizes"] = [&](const std::vector<std::string> &args) {
        if (sized) fail("echo reply sizes are already set");
        for (const auto &pair : args) {
            auto colon = pair.find(':');
            reply_sizes[to_u64(pair.substr(0, colon))] = to_u64(pair.substr(colon + 1));
        }
        sized.store(true, std::memory_order_release);
        return std::string();
    };
    // A plain TCP echo of kPingBytes messages for one connection, a thread
    // blocked in read(): the floor the round trips are measured against.
    int echo_fd = -1;
    std::thread tcp_echo;
    handlers["tcp-echo"] = [&](const std::vector<std::string> &) {
        if (echo_fd >= 0) fail("the tcp ping-pong is already up");
        echo_fd = listen_tcp();
        tcp_echo = std::thread([fd = echo_fd] {
            int c = accept(fd, nullptr, nullptr);
            if (c < 0) return;
            no_delay(c);
            char buf[kPingBytes];
            while (exchange(c, buf, false) && exchange(c, buf, true)) {
            }
            close(c);
        });
        return str(bound_port(echo_fd));
    };
    int rc = serve("server", handlers, kIdleLimit);
    if (echo_fd >= 0) shutdown(echo_fd, SHUT_RDWR);  // ends an accept still waiting
    if (tcp_echo.joinable()) tcp_echo.join();
    if (echo_fd >= 0) close(echo_fd);
    return rc;
}

// ---------------------------------------------------------------------------
// The simulated workers.

struct Figures {
    double rps = 0, p50_us = 0, p99_us = 0;
};

// Results of one target over all repetitions.
struct Target {
    Target(std::string n, uint64_t w, std::string u) : name(std::move(n)), workers(w), url(std::move(u)) {}
    std::string name;
    uint64_t workers = 0;  // 0: the echo server
    std::string url;
    std::vector<double> rps;  // per repetition, all kinds
    std::map<Kind, std::vector<float>> latency_us;
    std::map<Kind, uint64_t> count;
    double seconds = 0;
    Figures all() {
        std::vector<float> every;
        for (auto &[k, v] : latency_us) every.insert(every.end(), v.begin(), v.end());
        return {median(rps), quantile(every, 0.5), quantile(every, 0.99)};
    }
    // A kind's share of the median rate.
    Figures of(Kind k) {
        auto &v = latency_us[k];
        return {median(rps) * double(count[k]) / double(total()), quantile(v, 0.5), quantile(v, 0.99)};
    }
    uint64_t total() const {
        uint64_t n = 0;
        for (auto &[k, c] : count) n += c;
        return std::max<uint64_t>(n, 1);
    }
};

void require_clean(const RunStats &s, const std::string &what) {
    if (s.errors) fail(what, ": ", s.errors, " requests failed; first: ", s.first_error);
}

class Load {
  public:
    explicit Load(const Options &o) : o_(o), requests_(th_load::Shape{.topology = o.topology, .tensors = o.tensors}) {}

    // Registers W workers and gives every one a replica of shard 0.
    void setup(const std::string &url, uint64_t workers, uint64_t phase) {
        auto t0 = Clock::now();
        auto each_worker = [&](uint64_t first, Kind kind) {
            return [=, this](unsigned t, uint64_t n) -> std::optional<Call> {
                uint64_t w = first + t + n * o_.threads;
                if (w > workers) return std::nullopt;
                return Call{kind, w, id(phase, t, n), requests_.make(kind, w, id(phase, t, n))};
            };
        };
        auto check = [&](const Call &c, const uint8_t *r, size_t n) { return requests_.check(c.kind, c.worker, c.request_id, r, n); };
        require_clean(drive(url, o_.threads, 0, each_worker(1, Kind::Hello), check), "registering workers");
        Call pub{Kind::Publish, 1, id(phase + 1, 0, 0), requests_.publish(1, id(phase + 1, 0, 0))};
        require_clean(drive(url, 1, 0, [&](unsigned, uint64_t n) { return n ? std::nullopt : std::optional<Call>(pub); }, check),
                      "publishing");
        // Each reader plans (becoming a filling replica), then reports its copy done.
        std::vector<uint64_t> source(workers + 1, 0);
        auto note_source = [&](const Call &c, const uint8_t *r, size_t n) {
            std::string wrong = check(c, r, n);
            if (wrong.empty()) source[c.worker] = requests_.source_of(r, n);
            return wrong;
        };
        require_clean(drive(url, o_.threads, 0, each_worker(2, Kind::Plan), note_source), "planning replicas");
        auto done = [&](unsigned t, uint64_t n) -> std::optional<Call> {
            uint64_t w = 2 + t + n * o_.threads;
            if (w > workers) return std::nullopt;
            uint64_t rid = id(phase + 2, t, n);
            return Call{Kind::FetchDone, w, rid, requests_.fetch_done(w, rid, source[w])};
        };
        require_clean(drive(url, o_.threads, 0, done, check), "completing replicas");
        std::printf("setup: %llu workers, %llu replicas of one shard, in %.1f s\n", (unsigned long long)workers,
                    (unsigned long long)workers, std::chrono::duration<double>(Clock::now() - t0).count());
        std::fflush(stdout);
    }

    // The measured mix against a target; workers: ids to draw from.
    RunStats measure(const std::string &url, uint64_t workers, double seconds, uint64_t phase, const CheckReply &check) {
        uint64_t weight = 0;
        for (uint64_t m : o_.mix) weight += m;
        std::vector<std::mt19937_64> rng;
        for (unsigned t = 0; t < o_.threads; ++t) rng.emplace_back(phase * 1000 + t);
        auto make = [&, weight](unsigned t, uint64_t n) -> std::optional<Call> {
            uint64_t pick = rng[t]() % weight;
            size_t k = 0;
            while (pick >= o_.mix[k]) pick -= o_.mix[k++];
            uint64_t w = 1 + rng[t]() % workers;
            uint64_t rid = id(phase, t, n);
            return Call{kMeasured[k], w, rid, requests_.make(kMeasured[k], w, rid)};
        };
        return drive(url, o_.threads, seconds, make, check);
    }

    CheckReply server_check() {
        return [this](const Call &c, const uint8_t *r, size_t n) { return requests_.check(c.kind, c.worker, c.request_id, r, n); };
    }

    // Request size -> reply size of the real server, for the echo server.
    std::map<size_t, size_t> sample_sizes(const std::string &url, uint64_t workers, uint64_t phase) {
        std::map<size_t, size_t> sizes;
        std::mutex mu;
        auto check = [&](const Call &c, const uint8_t *r, size_t n) {
            std::lock_guard lk(mu);
            sizes[c.bytes.size()] = n;
            return requests_.check(c.kind, c.worker, c.request_id, r, n);
        };
        require_clean(measure(url, workers, 0.3, phase, check), "sampling reply sizes");
        return sizes;
    }

  private:
    // Unique per (phase, thread, n): PlanFetch replies are cached by request id.
    static uint64_t id(uint64_t phase, unsigned thread, uint64_t n) { return phase << 44 | uint64_t(thread) << 36 | (n + 1); }

    const Options &o_;
    Requests requests_;
};

std::string fmt_rate(double r) { return str(uint64_t(r + 0.5)); }

// Round trips after one idle gap, in microseconds.
struct Trips {
    unsigned idle_us = 0;
    std::vector<float> library, tcp;
};

// n round trips per idle gap, one request at a time: the client library's
// request path to the echo server and the plain TCP ping-pong, alternating.
std::vector<Trips> round_trips(Child &child, const std::string &echo_url, unsigned n) {
    auto port = static_cast<uint16_t>(to_u64(child.call("tcp-echo", kCommandLimit).at(0)));
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = loopback(port);
    if (fd < 0 || connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0) fail("cannot connect to the tcp ping-pong");
    no_delay(fd);
    th::RpcClient rpc(echo_url);
    const th::wire::Bytes request(kPingBytes, 0x5a);
    char buf[kPingBytes] = {};
    auto library_trip = [&] {
        if (rpc.call(request, th::Deadline(10000)).empty()) fail("the echo server answered nothing");
    };
    auto tcp_trip = [&] {
        if (!exchange(fd, buf, true) || !exchange(fd, buf, false)) fail("the tcp ping-pong broke off");
    };
    library_trip();  // connected, warm
    tcp_trip();
    auto timed = [](auto trip, unsigned idle_us) {
        std::this_thread::sleep_for(std::chrono::microseconds(idle_us));
        auto t0 = Clock::now();
        trip();
        return std::chrono::duration<float, std::micro>(Clock::now() - t0).count();
    };
    std::vector<Trips> out;
    for (unsigned idle : kIdleGapsUs) {
        Trips t;
        t.idle_us = idle;
        for (unsigned i = 0; i < n; ++i) {
            t.library.push_back(timed(library_trip, idle));
            t.tcp.push_back(timed(tcp_trip, idle));
        }
        out.push_back(std::move(t));
    }
    close(fd);
    return out;
}

int run_parent(const Options &o) {
    std::vector<std::string> child_args = {"tensorhub-server-load", "--role", "server", "--server-cpus", o.server_cpus};
    Child child("server", child_args);
    pin(o.client_cpus, "clients");
    std::string start = "start";
    for (uint64_t w : o.workers) start += str(" ", w);
    auto urls = child.call(start, kCommandLimit);
    if (urls.size() != o.workers.size() + 1) fail("the server process gave ", urls.size(), " URLs");

    std::printf("tensorhub metadata server under load: %u client threads (own connection, 1 request in flight each), "
                "mix plan:resolve:progress:heartbeat = %llu:%llu:%llu:%llu, %u tensors per shard, %s, %u x %.1f s per target\n",
                o.threads, (unsigned long long)o.mix[0], (unsigned long long)o.mix[1], (unsigned long long)o.mix[2], (unsigned long long)o.mix[3], o.tensors,
                o.topology ? "8 workers a host, 128 a rack" : "no topology labels", o.reps, o.seconds);
    std::printf("server process on CPUs %s, client threads on CPUs %s (of %u)\n", o.server_cpus.c_str(), o.client_cpus.c_str(),
                std::thread::hardware_concurrency());
    Load load(o);
    std::vector<Target> targets;
    targets.emplace_back("echo", 0, urls[0]);
    uint64_t phase = 1;
    for (size_t i = 0; i < o.workers.size(); ++i) {
        targets.emplace_back(str("server W=", o.workers[i]), o.workers[i], urls[i + 1]);
        load.setup(urls[i + 1], o.workers[i], phase);
        phase += 3;
    }
    // The echo server answers each request with as many bytes as the real
    // server does (the largest W's replies).
    std::map<size_t, size_t> sizes = load.sample_sizes(targets.back().url, targets.back().workers, phase++);
    std::string sizes_cmd = "sizes";
    for (auto [req, rep] : sizes) sizes_cmd += str(" ", req, ":", rep);
    child.call(sizes_cmd, kCommandLimit);
    CheckReply echo_check = [sizes](const Call &c, const uint8_t *, size_t n) {
        auto it = sizes.find(c.bytes.size());
        return it == sizes.end() || it->second == n ? std::string() : str("echo reply of ", n, " bytes");
    };

    for (unsigned rep = 0; rep < o.reps; ++rep) {
        for (Target &t : targets) {
            uint64_t workers = t.workers ? t.workers : o.workers.back();
            RunStats s = load.measure(t.url, workers, o.seconds, phase++, t.workers ? load.server_check() : echo_check);
            require_clean(s, t.name);
            t.rps.push_back(double(s.requests()) / s.seconds);
            t.seconds += s.seconds;
            for (auto &[k, v] : s.latency_us) {
                t.count[k] += v.size();
                t.latency_us[k].insert(t.latency_us[k].end(), v.begin(), v.end());
            }
        }
    }
    std::vector<Trips> trips = round_trips(child, urls[0], o.smoke ? 20 : 400);
    child.finish(kCommandLimit);

    Figures echo = targets[0].all();
    std::printf("\n%-16s %-9s %10s %9s %9s %7s\n", "target", "request", "req/s", "p50 us", "p99 us", "ratio");
    auto row = [&](const std::string &target, const char *kind, Figures f, bool ratio) {
        std::printf("%-16s %-9s %10s %9.1f %9.1f %7s\n", target.c_str(), kind, fmt_rate(f.rps).c_str(), f.p50_us, f.p99_us,
                    ratio ? str(std::fixed, std::setprecision(3), f.rps / echo.rps).c_str() : "");
    };
    for (Target &t : targets) {
        if (t.workers)
            for (Kind k : kMeasured)
                if (t.count[k]) row(t.name, kind_name(k), t.of(k), false);
        row(t.name, "all", t.all(), t.workers != 0);
    }
    Target &big = targets.back();
    Figures top = big.all();
    bool met = top.rps >= 0.9 * echo.rps && top.p99_us < 2000;
    std::printf("\ngoal (W=%llu: >= 0.9x echo req/s, p99 < 2 ms): %s (%.3fx, p99 %.0f us)\n",
                (unsigned long long)big.workers, met ? "met" : "missed", top.rps / echo.rps, top.p99_us);
    std::printf("\nround trip, one request at a time (p50 / p90 us over %zu):\n%-12s %-32s %s\n", trips[0].tcp.size(),
                "idle before", "library (RpcClient -> echo)", "plain TCP ping-pong");
    for (Trips &t : trips)
        std::printf("%7u us   %-32s %s\n", t.idle_us,
                    str(std::fixed, std::setprecision(1), quantile(t.library, 0.5), " / ", quantile(t.library, 0.9)).c_str(),
                    str(std::fixed, std::setprecision(1), quantile(t.tcp, 0.5), " / ", quantile(t.tcp, 0.9)).c_str());
    if (o.markdown) {
        std::printf("\n| target | request | req/s | p50 µs | p99 µs | vs echo |\n|---|---|---:|---:|---:|---:|\n");
        for (Target &t : targets) {
            if (t.workers)
                for (Kind k : kMeasured) {
                    if (!t.count[k]) continue;
                    Figures f = t.of(k);
                    std::printf("| %s | %s | %s | %.0f | %.0f | |\n", t.name.c_str(), kind_name(k), fmt_rate(f.rps).c_str(), f.p50_us,
                                f.p99_us);
                }
            Figures f = t.all();
            std::printf("| %s | all | %s | %.0f | %.0f | %s |\n", t.name.c_str(), fmt_rate(f.rps).c_str(), f.p50_us, f.p99_us,
                        t.workers ? str(std::fixed, std::setprecision(2), f.rps / echo.rps, "x").c_str() : "");
        }
    }
    std::printf("{\"bench\":\"server_load\",\"labels\":\"%s\",\"threads\":%u,\"seconds\":%.1f,\"reps\":%u,\"echo\":{\"rps\":%.0f,\"p50_us\":%.1f,"
                "\"p99_us\":%.1f},\"servers\":[",
                o.topology ? "racks" : "none", o.threads, o.seconds, o.reps, echo.rps, echo.p50_us, echo.p99_us);
    for (size_t i = 1; i < targets.size(); ++i) {
        Figures f = targets[i].all();
        std::printf("%s{\"workers\":%llu,\"rps\":%.0f,\"p50_us\":%.1f,\"p99_us\":%.1f,\"ratio\":%.3f", i > 1 ? "," : "",
                    (unsigned long long)targets[i].workers, f.rps, f.p50_us, f.p99_us, f.rps / echo.rps);
        for (Kind k : kMeasured) {
            if (!targets[i].count[k]) continue;
            Figures g = targets[i].of(k);
            std::printf(",\"%s\":{\"rps\":%.0f,\"p50_us\":%.1f,\"p99_us\":%.1f}", kind_name(k), g.rps, g.p50_us, g.p99_us);
        }
        std::printf("}");
    }
    std::printf("],\"round_trip\":[");
    for (size_t i = 0; i < trips.size(); ++i)
        std::printf("%s{\"idle_us\":%u,\"library_p50_us\":%.1f,\"library_p90_us\":%.1f,\"tcp_p50_us\":%.1f,\"tcp_p90_us\":%.1f}",
                    i ? "," : "", trips[i].idle_us, quantile(trips[i].library, 0.5), quantile(trips[i].library, 0.9),
                    quantile(trips[i].tcp, 0.5), quantile(trips[i].tcp, 0.9));
    std::printf("],\"goal_met\":%s}\n", met ? "true" : "false");
    return 0;
}

Options parse(const th_support::Args &args) {
    Options o;
    if (args.has("smoke")) {
        o.smoke = true;
        o.workers = {50};
        o.threads = 4;
        o.seconds = 1;
        o.reps = 1;
        o.tensors = 4;
        o.mix = {1, 1, 1, 1};
    }
    if (args.has("workers")) {
        o.workers.clear();
        for (const auto &s : split(args.get("workers"), ',')) o.workers.push_back(to_u64(s));
    }
    if (args.has("mix")) {
        o.mix.clear();
        for (const auto &s : split(args.get("mix"), ',')) o.mix.push_back(to_u64(s));
    }
    o.threads = static_cast<unsigned>(args.get_u64("threads", o.threads));
    o.seconds = args.get_double("seconds", o.seconds);
    o.reps = static_cast<unsigned>(args.get_u64("reps", o.reps));
    o.tensors = static_cast<uint32_t>(args.get_u64("tensors", o.tensors));
    o.server_cpus = args.get("server-cpus");
    o.client_cpus = args.get("client-cpus");
    o.markdown = args.has("markdown");
    std::string labels = args.get("labels", "racks");
    if (labels != "racks" && labels != "none") fail("--labels takes racks or none");
    o.topology = labels == "racks";
    default_split(o);
    uint64_t weight = 0;
    for (uint64_t m : o.mix) weight += m;
    if (o.mix.size() == 3) o.mix.push_back(0);
    if (o.mix.size() != 4 || weight == 0) fail("--mix takes weights plan,resolve,progress[,heartbeat]");
    if (o.workers.empty() || o.threads < 1 || o.seconds <= 0 || o.reps < 1 || o.tensors < 1)
        fail("--workers, --threads, --seconds, --reps and --tensors must be positive");
    for (uint64_t w : o.workers)
        if (w < 2 || w > (1ull << 32)) fail("--workers: each count must be between 2 and 2^32");
    return o;
}

}  // namespace

int main(int argc, char **argv) {
    try {
        th_support::Args args(argc, argv, {"help", "smoke", "markdown"});
        if (args.has("help")) {
            std::printf("usage: tensorhub-server-load [--workers 1000,10000] [--threads 8] [--seconds 1.5] [--reps 9] "
                        "[--mix 1,1,1,0] [--tensors 16] [--labels racks|none] [--server-cpus LIST] [--client-cpus LIST] [--markdown] [--smoke]\n");
            return 0;
        }
        auto bad = args.unknown({"workers", "threads", "seconds", "reps", "mix", "tensors", "server-cpus", "client-cpus",
                                 "markdown", "smoke", "role", "labels"});
        if (!bad.empty()) fail("unknown option --", bad[0], " (see --help)");
        Options o = parse(args);
        ensure_std_fds();
        if (args.get("role") == "server") return run_servers(o);
        if (args.has("role")) fail("unknown role '", args.get("role"), "'");
        return run_parent(o);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "tensorhub-server-load: %s\n", e.what());
        return 1;
    }
}
