// A small harness for tests that use the public API: an embedded server,
// clients, shards of known bytes, and child processes (nng's NUTS_MARRY idea).
#pragma once

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <regex>
#include <cstring>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "host_shard.hpp"
#include "process.hpp"
#include "tensorhub/tensorhub.h"

namespace th_test {

using Clock = std::chrono::steady_clock;
using th_support::Process;

// Buffers of one shard: n bfloat16 tensors "w0".."w{n-1}" of `bytes` each,
// holding the pattern of (version, shard) when a version is given.
struct Shard : th_support::HostShard {
    Shard(int n, uint64_t bytes, uint64_t version = 0, uint32_t shard = 0) : HostShard(n, bytes, TH_DTYPE_BFLOAT16) {
        if (version) fill(version, shard);
    }
};

// http: also serve the HTTP endpoint (/metrics, the live page) on a free port.
inline th_server *start_server(const char *url = nullptr, bool http = false, uint32_t lease_ms = 0,
                               uint32_t stripes = TH_DEFAULT_STRIPES) {
    th_server_config sc;
    th_server_config_init(&sc, sizeof sc);
    if (url) sc.listen_url = url;
    if (http) sc.metrics_url = "http://127.0.0.1:0";
    if (lease_ms) sc.lease_ms = lease_ms;
    sc.stripes = stripes;
    th_server *s = nullptr;
    EXPECT_EQ(th_server_create(&s, &sc), TH_OK) << th_last_error();
    return s;
}

// An embedded server for one test (stripes: th_server_config.stripes).
struct ServerGuard {
    explicit ServerGuard(uint32_t stripes = TH_DEFAULT_STRIPES) : server(start_server(nullptr, false, 0, stripes)) {}
    th_server *server;
    std::string url = th_server_url(server);
    ~ServerGuard() { th_server_destroy(server); }
};

inline th_client *connect(const std::string &url, const char *name, uint32_t timeout_ms = 5000,
                          th_retention retention = TH_RETAIN_SPILL, const char *labels = nullptr) {
    th_client_config cc;
    th_client_config_init(&cc, sizeof cc);
    cc.retention = retention;
    cc.labels = labels;
    cc.mutation_wait_ms = 2000;
    cc.server_url = url.c_str();
    cc.worker_name = name;
    cc.timeout_ms = timeout_ms;
    cc.heartbeat_ms = 100;
    th_client *c = nullptr;
    EXPECT_EQ(th_client_create(&c, &cc), TH_OK) << th_last_error();
    return c;
}

inline th_status publish(th_client *c, const char *model, uint64_t version, uint32_t shard, uint32_t num_shards, Shard &s,
                  th_replica **out, th_sync_stats *stats = nullptr) {
    th_publish_config pc;
    th_publish_config_init(&pc, sizeof pc);
    pc.model = model;
    pc.version = version;
    pc.shard = shard;
    pc.num_shards = num_shards;
    pc.chunk_bytes = 64 << 10;
    pc.stats = stats;
    return th_publish(c, &pc, s.views.data(), s.views.size(), out);
}

inline th_status fetch(th_client *c, const char *model, uint64_t version, uint32_t shard, Shard &s, uint64_t *got = nullptr,
                th_replica **out = nullptr, uint32_t timeout_ms = 10000, th_verify verify = TH_DEFAULT_VERIFY) {
    th_fetch_config fc;
    th_fetch_config_init(&fc, sizeof fc);
    fc.model = model;
    fc.version = version;
    fc.shard = shard;
    fc.timeout_ms = timeout_ms;
    fc.verify = verify;
    return th_fetch(c, &fc, s.views.data(), s.views.size(), got, out);
}

#define EXPECT_ERROR(call, code, text)                                                        \
    do {                                                                                      \
        th_status st_ = (call);                                                               \
        EXPECT_EQ(st_, code) << th_status_str(st_) << ": " << th_last_error();                \
        EXPECT_NE(std::string(th_last_error()).find(text), std::string::npos) << th_last_error(); \
    } while (0)


// Whether a fetch between two processes of this host reads one-sided (the
// bytes_one_sided of its th_sync_stats): on the default lanes (shared memory)
// with a UCX that keeps one-sided GETs under peer error handling (>= 1.19,
// TH_TEST_UCX_ONE_SIDED), not over tcp. Other UCX_TLS settings: unknown.
inline std::optional<bool> reads_one_sided() {
    const char *tls = std::getenv("UCX_TLS");
    if (tls == nullptr) return TH_TEST_UCX_ONE_SIDED != 0;
    if (std::string(tls) == "tcp") return false;
    return std::nullopt;
}

inline uint64_t field(const std::string &line, const std::string &key) {
    size_t at = line.find(key + "=");
    if (at == std::string::npos) return 0;
    return std::stoull(line.substr(at + key.size() + 1));
}

inline nlohmann::json server_status(const std::string &url) {
    char *out = nullptr;
    EXPECT_EQ(th_server_status_json(url.c_str(), 5000, &out), TH_OK) << th_last_error();
    auto j = nlohmann::json::parse(out ? out : "{}");
    th_free(out);
    return j;
}

// A tensorhub-server process (TH_SERVER_BIN) listening on a free port;
// its url once it listens.
struct ServerProc {
    Process proc;
    std::string url;
    // env: extra environment variables (fault hooks).
    explicit ServerProc(bool standby = false, const std::vector<std::string> &env = {}) : proc(argv(standby, env)) {
        std::string l = proc.line(10000);
        EXPECT_EQ(l.rfind("listening on ", 0), 0u) << l;
        url = l.substr(13);
    }
    uint64_t epoch() { return server_status(url)["server_epoch"].get<uint64_t>(); }
    static std::vector<std::string> argv(bool standby, const std::vector<std::string> &env) {
        std::vector<std::string> out = {"/usr/bin/env"};
        out.insert(out.end(), env.begin(), env.end());
        out.insert(out.end(), {TH_SERVER_BIN, "--listen", "tcp://127.0.0.1:0", "--lease-ms", "3000"});
        if (standby) out.push_back("--standby");
        return out;
    }
};

// The status entry of one version, or null.
inline nlohmann::json version_status(const nlohmann::json &s, const std::string &model, uint64_t v) {
    for (const auto &m : s["models"])
        if (m["name"] == model)
            for (const auto &ver : m["versions"])
                if (ver["version"].get<uint64_t>() == v) return ver;
    return nullptr;
}

// Whether `worker` (any worker, if 0) holds a complete replica of shard 0 of
// (model, v).
inline bool holds_complete(const nlohmann::json &s, const std::string &model, uint64_t v, uint64_t worker = 0) {
    nlohmann::json ver = version_status(s, model, v);
    if (ver.is_null()) return false;
    for (const auto &r : ver["shards"][0]["replicas"])
        if ((worker == 0 || r["worker_id"].get<uint64_t>() == worker) && r["complete"].get<bool>()) return true;
    return false;
}

// Waits up to ms for pred(status) to hold.
template <typename Pred>
bool eventually(const std::string &url, Pred pred, int ms = 10000) {
    auto end = Clock::now() + std::chrono::milliseconds(ms);
    while (Clock::now() < end) {
        if (pred(server_status(url))) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
}

// GET of an http://127.0.0.1:PORT/path URL; the body, or "" on failure.
inline std::string http_get(const std::string &url) {
    std::smatch m;
    if (!std::regex_match(url, m, std::regex(R"(http://([0-9.]+):([0-9]+)(/.*))"))) return "";
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(std::stoi(m[2])));
    inet_pton(AF_INET, m[1].str().c_str(), &sa.sin_addr);
    timeval tv{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (::connect(fd, reinterpret_cast<sockaddr *>(&sa), sizeof sa) != 0) {
        close(fd);
        return "";
    }
    std::string req = "GET " + m[3].str() + " HTTP/1.0\r\nHost: x\r\n\r\n";
    (void)!write(fd, req.data(), req.size());
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
    close(fd);
    size_t body = out.find("\r\n\r\n");
    return body == std::string::npos ? "" : out.substr(body + 4);
}

// The worker binary, with extra environment variables.
inline std::vector<std::string> worker(std::vector<std::string> args, std::vector<std::string> env = {}) {
    std::vector<std::string> out = {"/usr/bin/env"};
    out.insert(out.end(), env.begin(), env.end());
    out.push_back(TH_TEST_WORKER);
    out.insert(out.end(), args.begin(), args.end());
    return out;
}

}  // namespace th_test
