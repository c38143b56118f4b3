// The definitions of run.hpp: one run of the fault-injection suite.
#include "run.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tensorhub/tensorhub.h"

namespace th_fault {

json server_status(const std::string &url, uint32_t timeout_ms) {
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

Run::Run(const Options &opt, const KindInfo &kind, int index, uint64_t seed, std::string dir)
    : opt_(opt),
      kind_(kind),
      index_(index),
      seed_(seed),
      rng_(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(kind.kind)),
      dir_(std::move(dir)),
      t0_(Clock::now()) {
    std::filesystem::create_directories(dir_);
}

Run::~Run() {
    for (auto &c : children_) c->signal(SIGKILL);
    for (auto &f : watchers_) f.wait();
    children_.clear();
    proxy_.reset();
}

void Run::violation(const std::string &what, const Child *about) {
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

Child &Run::spawn(const std::string &name, const std::string &binary, const std::vector<std::string> &args,
                  std::vector<std::string> env) {
    // Keep the data plane on the loopback too, unless the caller chose.
    if (!std::getenv("UCX_NET_DEVICES")) env.push_back("UCX_NET_DEVICES=lo");
    env.push_back("TENSORHUB_LOG_LEVEL=info");  // "dropping source" lines are our evidence
    children_.push_back(std::make_unique<Child>(name, binary, args, env, dir_ + "/" + name + ".log"));
    return *children_.back();
}

std::string Run::start_server(const std::string &name, uint32_t lease_ms, bool standby, const std::string &listen,
                              const std::vector<std::string> &more) {
    std::vector<std::string> args = {"--listen", listen, "--lease-ms", std::to_string(lease_ms)};
    if (standby) args.push_back("--standby");
    args.insert(args.end(), more.begin(), more.end());
    Child &c = spawn(name, opt_.server_bin, args);
    std::string l = c.line(10000);
    if (l.rfind("listening on ", 0) != 0) {
        std::optional<std::string> how = c.ended();
        violation("server " + name + " did not start: '" + l + "' (" +
                      (how ? "it ended: " + *how : std::string("still running, silent for 10 s")) + ")",
                  &c);
        return "";
    }
    servers_[name] = &c;
    return l.substr(13);
}

Child *Run::server(const std::string &name) { return servers_[name]; }

std::string Run::start_etcd(const std::string &name) {
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

TcpProxy &Run::start_proxy(const std::string &server_url) {
    proxy_ =
        std::make_unique<TcpProxy>(static_cast<uint16_t>(std::stoul(server_url.substr(server_url.rfind(':') + 1))));
    return *proxy_;
}

Child *Run::child(const std::string &name) {
    for (auto &c : children_)
        if (c->name() == name) return c.get();
    return nullptr;
}

void Run::set_client_options(std::vector<std::string> opts) { client_opts_ = std::move(opts); }

uint32_t Run::timeout_ms() const {
    for (size_t i = 0; i + 1 < client_opts_.size(); ++i)
        if (client_opts_[i] == "--timeout-ms") return static_cast<uint32_t>(std::stoul(client_opts_[i + 1]));
    return 10000;
}

int Run::hung_bound_ms() const { return static_cast<int>(timeout_ms()) * 8 + 5000; }

Child &Run::worker(const std::string &name, std::vector<std::string> args, std::vector<std::string> env) {
    return worker_from(opt_.worker_bin, name, std::move(args), std::move(env));
}

uint64_t Run::start_publisher(const std::string &url, const Layout &layout) {
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

Reader Run::start_reader(const std::string &name, const std::string &url, const Layout &layout,
                        const ReaderSpec &spec, const std::string &verify) {
    std::vector<std::string> args = {"fetch", "--server", url, "--shards", layout.shard_list()};
    auto sizes = layout.sizes();
    args.insert(args.end(), sizes.begin(), sizes.end());
    if (!spec.serve) args.insert(args.end(), {"--no-serve", "--exit"});
    if (!verify.empty()) args.insert(args.end(), {"--verify", verify});
    std::vector<std::string> env;
    if (spec.delay_us) env.push_back("TENSORHUB_FAULT_CHUNK_DELAY_US=" + std::to_string(spec.delay_us));
    return watch(worker(name, args, env));
}

Reader Run::watch(Child &c, int extra_ms) {
    int bound = hung_bound_ms() + extra_ms;
    auto f = std::async(std::launch::async, [&c, bound] {
                 std::string l = c.line(bound);
                 return Outcome{l, Clock::now()};
             }).share();
    watchers_.push_back(f);
    return Reader{&c, f};
}

bool Run::settle(const Reader &r, uint64_t version, Outcome *out) {
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

bool Run::loop_ended(Child &publisher, const std::string &who, uint64_t *published) {
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

std::optional<std::string> Run::ended_soon(const Child &c) {
    for (int i = 0; i < 500 && !c.ended(); ++i) sleep_ms(10);
    return c.ended();
}

void Run::expect_available(const std::string &url, const Layout &layout, const std::vector<Child *> &holders,
                           const std::string &context, int retry_ms) {
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

uint64_t Run::wait_serving(const std::string &server_url, const std::string &name, int ms) {
    auto end = Clock::now() + Ms(ms);
    while (Clock::now() < end) {
        json s = server_status(server_url, 500);
        if (const json *w = worker_named(s, name); w && (*w)["active_reads"].get<uint64_t>() > 0)
            return (*w)["worker_id"].get<uint64_t>();
        sleep_ms(5);
    }
    return 0;
}

uint64_t Run::worker_field(const std::string &server_url, const std::string &name, const char *field) {
    const json s = server_status(server_url, 1000);
    const json *w = worker_named(s, name);
    return w ? (*w)[field].get<uint64_t>() : 0;
}

void Run::mark_fault(Clock::time_point at, const std::string &what) {
    result.fault_at_ms = ms_between(t0_, at);
    result.fault = what;
}

void Run::measure_recovery(const std::vector<Reader> &readers, const std::vector<bool> &in_flight,
                           Clock::time_point fault, uint64_t victim, bool read_through) {
    int flying = 0, dropped = 0;
    for (size_t i = 0; i < readers.size(); ++i) {
        if (!in_flight[i]) continue;
        flying++;
        if (victim && !readers[i].child->log_contains("dropping source worker " + std::to_string(victim))) continue;
        dropped++;
        result.injected = true;
        Outcome o = readers[i].outcome.get();
        if (o.line.rfind("ok", 0) == 0) result.recovery_ms.push_back(static_cast<double>(ms_between(fault, o.at)));
    }
    if (!read_through || flying == 0) return;
    result.injected = true;
    result.fault += ", " + std::to_string(dropped) + " of " + std::to_string(flying) + " readers in flight dropped it";
}

std::vector<bool> Run::in_flight(const std::vector<Reader> &readers) {
    std::vector<bool> out;
    for (const Reader &r : readers) out.push_back(r.in_flight());
    return out;
}

void Run::finish() {
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
    // A close that waited out its bound (control/close.hpp) is a hang the
    // library survived, not a pass: NNG 1.5.2 loses its reaper that way.
    for (auto &c : children_) {
        std::ifstream log(c->log());
        for (std::string line; std::getline(log, line);)
            if (line.find(" did not end within ") != std::string::npos) {
                result.hung++;
                violation(c->name() + " waited out a close's bound: '" + line + "'", c.get());
                break;
            }
    }
}

std::string Run::capture_stacks(const Child &c) {
    if (access("/usr/bin/gdb", X_OK) != 0) return "";
    std::string out = dir_ + "/" + c.name() + ".stacks";
    std::string cmd = "timeout 60 /usr/bin/gdb -p " + std::to_string(c.pid()) +
                      " -batch -ex 'thread apply all bt' >" + out + " 2>&1";
    if (std::system(cmd.c_str()) != 0) return "";
    return "; its stacks: " + out + "\n" + stack_summary(out);
}

std::string Run::stack_summary(const std::string &path) {
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

Child &Run::worker_from(const std::string &binary, const std::string &name, std::vector<std::string> args,
                        std::vector<std::string> env) {
    args.insert(args.end(), {"--name", name});
    args.insert(args.end(), client_opts_.begin(), client_opts_.end());
    return spawn(name, binary, args, std::move(env));
}

void Run::terminate(const std::vector<Child *> &up) {
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

Layout random_layout(Run &run) {
    Layout l;
    l.version = run.pick(1, 1000);
    l.shards = static_cast<uint32_t>(run.pick(1, 2));
    l.tensors = static_cast<int>(run.pick(2, 5));
    return l;
}

std::vector<Reader> start_slow_readers(Run &run, const std::string &url, const Layout &layout, uint64_t *max_delay_us,
                                       bool serve) {
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

void sleep_random_part_of(Run &run, int64_t transfer_ms) {
    sleep_ms(static_cast<int64_t>(run.pick(0, std::max<int64_t>(transfer_ms / 2, 1))));
}

std::pair<uint64_t, uint64_t> two_holders(Run &run, const std::string &url, const Layout &layout) {
    uint64_t pub = run.start_publisher(url, layout);
    if (!pub) return {0, 0};
    Reader r1 = run.start_reader("r1", url, layout, {true, 0});
    Outcome o;
    if (!run.settle(r1, layout.version, &o)) return {0, 0};
    return {pub, field(o.line, "worker")};
}

}  // namespace th_fault
