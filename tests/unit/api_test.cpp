// The C API's error plumbing, argument checks and logging.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <ucs/debug/log_def.h>

#include "common/log.hpp"
#include "tensorhub/tensorhub.h"

TEST(Api, StatusStringsAndVersion) {
    EXPECT_STREQ(th_status_str(TH_OK), "ok");
    EXPECT_STREQ(th_status_str(TH_ERR_TIMEOUT), "timed out");
    EXPECT_EQ(th_version_number(), static_cast<uint32_t>(TH_VERSION_NUMBER));
    EXPECT_EQ(std::string(th_version()), std::to_string(TH_VERSION_MAJOR) + "." + std::to_string(TH_VERSION_MINOR) + "." +
                                             std::to_string(TH_VERSION_PATCH));
    EXPECT_EQ(th_dtype_size(TH_DTYPE_BFLOAT16), 2u);
    // Out-of-range enum values (which C callers can pass) are tested in C: tests/c.
}

TEST(Api, LastErrorIsPerThreadAndNamesTheProblem) {
    th_client *c = nullptr;
    EXPECT_EQ(th_client_create(&c, nullptr), TH_ERR_INVALID_ARG);
    EXPECT_EQ(c, nullptr);
    std::string mine = th_last_error();
    EXPECT_NE(mine.find("th_client_config is NULL"), std::string::npos) << mine;
    std::thread([] { EXPECT_STREQ(th_last_error(), ""); }).join();
    EXPECT_EQ(std::string(th_last_error()), mine);
}

TEST(Api, ConfigStructsMustBeInitialised) {
    th_client_config cfg{};
    th_client *c = nullptr;
    EXPECT_EQ(th_client_create(&c, &cfg), TH_ERR_INVALID_ARG);
    EXPECT_NE(std::string(th_last_error()).find("th_client_config_init"), std::string::npos) << th_last_error();
    th_client_config_init(&cfg, sizeof cfg);
    EXPECT_EQ(th_client_create(&c, &cfg), TH_ERR_INVALID_ARG);  // no server_url
    EXPECT_NE(std::string(th_last_error()).find("server_url"), std::string::npos);
    cfg.server_url = "tcp://127.0.0.1:1";
    cfg.labels = "dc";
    EXPECT_EQ(th_client_create(&c, &cfg), TH_ERR_INVALID_ARG);
    EXPECT_NE(std::string(th_last_error()).find("key=value"), std::string::npos);
    cfg.labels = nullptr;
    cfg.spill_ahead = 2;
    EXPECT_EQ(th_client_create(&c, &cfg), TH_ERR_INVALID_ARG);
    EXPECT_NE(std::string(th_last_error()).find("spill_ahead"), std::string::npos) << th_last_error();
    cfg.spill_ahead = 0;
    for (uint32_t bad : {0u, uint32_t{TH_MAX_COPY_THREADS} + 1}) {
        cfg.copy_threads = bad;
        EXPECT_EQ(th_client_create(&c, &cfg), TH_ERR_INVALID_ARG);
        EXPECT_NE(std::string(th_last_error()).find("copy_threads must be 1 to 16, not " + std::to_string(bad)),
                  std::string::npos)
            << th_last_error();
    }
    cfg.copy_threads = TH_DEFAULT_COPY_THREADS;
    cfg.server_url = "bogus://x";
    EXPECT_EQ(th_client_create(&c, &cfg), TH_ERR_INVALID_ARG);
    EXPECT_NE(std::string(th_last_error()).find("bogus://x"), std::string::npos) << th_last_error();
}

// The header's TH_DEFAULT_* are what *_config_init fills in, and what the
// library's own types start from: one place for every default.
TEST(Api, ConfigInitFillsInTheHeadersDefaults) {
    th_server_config s;
    th_server_config_init(&s, sizeof s);
    EXPECT_STREQ(s.listen_url, TH_DEFAULT_LISTEN_URL);
    EXPECT_EQ(s.lease_ms, uint32_t{TH_DEFAULT_LEASE_MS});
    EXPECT_EQ(s.max_readers_per_source, uint32_t{TH_DEFAULT_MAX_READERS_PER_SOURCE});
    th_client_config c;
    th_client_config_init(&c, sizeof c);
    EXPECT_EQ(c.timeout_ms, uint32_t{TH_DEFAULT_TIMEOUT_MS});
    EXPECT_EQ(c.heartbeat_ms, uint32_t{TH_DEFAULT_HEARTBEAT_MS});
    EXPECT_EQ(c.chunk_timeout_ms, uint32_t{TH_DEFAULT_CHUNK_TIMEOUT_MS});
    EXPECT_EQ(c.max_inflight, uint32_t{TH_DEFAULT_MAX_INFLIGHT});
    EXPECT_EQ(c.retention, TH_DEFAULT_RETENTION);
    EXPECT_EQ(c.mutation_wait_ms, uint32_t{TH_DEFAULT_MUTATION_WAIT_MS});
    EXPECT_EQ(c.spill_pool_bytes, uint64_t{TH_DEFAULT_SPILL_POOL_BYTES});
    EXPECT_EQ(c.spill_ahead, uint32_t{TH_DEFAULT_SPILL_AHEAD});
    EXPECT_EQ(c.copy_threads, uint32_t{TH_DEFAULT_COPY_THREADS});
    th_publish_config p;
    th_publish_config_init(&p, sizeof p);
    EXPECT_EQ(p.num_shards, uint32_t{TH_DEFAULT_NUM_SHARDS});
    EXPECT_EQ(p.chunk_bytes, uint64_t{TH_DEFAULT_CHUNK_BYTES});
    th_fetch_config f;
    th_fetch_config_init(&f, sizeof f);
    EXPECT_EQ(f.progress_interval_ms, uint32_t{TH_DEFAULT_PROGRESS_INTERVAL_MS});
    EXPECT_EQ(f.version, TH_LATEST);
}

TEST(Api, OlderSmallerConfigStructsStillWork) {
    // A program built against a header whose struct ended earlier passes its
    // smaller size: init writes nothing past it, and the library uses its
    // defaults for the fields the program does not have.
    const size_t old_size = offsetof(th_server_config, lease_ms);
    unsigned char storage[sizeof(th_server_config) + 16];
    std::memset(storage, 0xab, sizeof storage);
    auto *cfg = reinterpret_cast<th_server_config *>(storage);
    th_server_config_init(cfg, old_size);
    EXPECT_EQ(cfg->struct_size, old_size);
    for (size_t i = old_size; i < sizeof storage; ++i) ASSERT_EQ(storage[i], 0xab) << "init wrote byte " << i;
    th_server *s = nullptr;
    ASSERT_EQ(th_server_create(&s, cfg), TH_OK) << th_last_error();
    EXPECT_NE(std::string(th_server_url(s)).find("tcp://127.0.0.1:"), std::string::npos);
    th_server_destroy(s);
    // A newer program's larger struct: the library fills what it knows.
    unsigned char bigger[sizeof(th_client_config) + 64];
    std::memset(bigger, 0xcd, sizeof bigger);
    auto *cc = reinterpret_cast<th_client_config *>(bigger);
    th_client_config_init(cc, sizeof bigger);
    EXPECT_EQ(cc->struct_size, sizeof(th_client_config));
    EXPECT_EQ(cc->timeout_ms, 10000u);
    EXPECT_EQ(bigger[sizeof bigger - 1], 0);  // zeroed, not left as garbage
}

TEST(Api, NullHandlesAreHarmless) {
    th_server_destroy(nullptr);
    th_client_destroy(nullptr);
    EXPECT_EQ(th_replica_release(nullptr), TH_OK);
    th_free(nullptr);
    EXPECT_EQ(th_client_worker_id(nullptr), 0u);
    th_fetch_config f;
    th_fetch_config_init(&f, sizeof f);
    EXPECT_EQ(th_fetch(nullptr, &f, nullptr, 0, nullptr, nullptr), TH_ERR_INVALID_ARG);
    uint64_t v = 0;
    EXPECT_EQ(th_resolve(nullptr, "m", TH_LATEST, &v), TH_ERR_INVALID_ARG);
}

TEST(Api, ServerUrlInUseIsReported) {
    th_server_config cfg;
    th_server_config_init(&cfg, sizeof cfg);
    th_server *a = nullptr, *b = nullptr;
    ASSERT_EQ(th_server_create(&a, &cfg), TH_OK);
    std::string url = th_server_url(a);
    cfg.listen_url = url.c_str();
    EXPECT_EQ(th_server_create(&b, &cfg), TH_ERR_UNAVAILABLE);
    EXPECT_NE(std::string(th_last_error()).find(url), std::string::npos) << th_last_error();
    th_server_destroy(a);
}

namespace {

// What a log handler was given.
struct LogLines {
    std::mutex mu;
    std::vector<std::pair<th_log_level, std::string>> lines;

    static void take(th_log_level level, const char *message, void *user_data) {
        auto *self = static_cast<LogLines *>(user_data);
        std::lock_guard lk(self->mu);
        self->lines.emplace_back(level, message);
    }
    // The first line holding `part`, if any.
    std::optional<std::pair<th_log_level, std::string>> find(const std::string &part) {
        std::lock_guard lk(mu);
        for (auto &l : lines)
            if (l.second.find(part) != std::string::npos) return l;
        return std::nullopt;
    }
};

// A server and one worker registered with it: the server logs the worker's
// registration at info.
void register_a_worker(const char *name) {
    th_server_config scfg;
    th_server_config_init(&scfg, sizeof scfg);
    th_server *server = nullptr;
    ASSERT_EQ(th_server_create(&server, &scfg), TH_OK) << th_last_error();
    th_client_config ccfg;
    th_client_config_init(&ccfg, sizeof ccfg);
    ccfg.server_url = th_server_url(server);
    ccfg.worker_name = name;
    th_client *client = nullptr;
    EXPECT_EQ(th_client_create(&client, &ccfg), TH_OK) << th_last_error();
    th_client_destroy(client);
    th_server_destroy(server);
}

// Restores the process's logging as a test found it.
struct LogRestore {
    th_log_level level = th_get_log_level();
    ~LogRestore() {
        th_set_log_handler(nullptr, nullptr);
        th_set_log_level(level);
    }
};

}  // namespace

// The library's lines, and UCX's, reach the application's handler at the
// level in force, and none reaches stderr meanwhile; without a handler they
// go to stderr again.
TEST(Api, LogLinesGoToTheApplicationsHandlerAtTheLevelInForce) {
    LogRestore restore;
    LogLines got;
    EXPECT_EQ(th_set_log_level(static_cast<th_log_level>(7)), TH_ERR_INVALID_ARG);
    ASSERT_EQ(th_set_log_level(TH_LOG_INFO), TH_OK);
    EXPECT_EQ(th_get_log_level(), TH_LOG_INFO);
    th_set_log_handler(LogLines::take, &got);
    testing::internal::CaptureStderr();
    register_a_worker("logged");
    ucs_error("dialling %s failed", "a test's peer");  // through UCX's own dispatch, as its lines come
    std::string stderr_text = testing::internal::GetCapturedStderr();
    auto registered = got.find("'logged' registered");
    ASSERT_TRUE(registered.has_value());
    EXPECT_EQ(registered->first, TH_LOG_INFO);
    if (std::getenv("UCX_LOG_LEVEL") == nullptr) {  // else UCX prints its own, as asked
        auto ucx = got.find("ucx: dialling a test's peer failed");
        ASSERT_TRUE(ucx.has_value()) << "UCX's line did not come through tensorhub's log";
        EXPECT_EQ(ucx->first, TH_LOG_INFO) << "UCX's errors are details of failures the library reports itself";
        EXPECT_NE(ucx->second.find("api_test.cpp:"), std::string::npos) << ucx->second;
        EXPECT_EQ(stderr_text, "");
    }

    ASSERT_EQ(th_set_log_level(TH_LOG_WARN), TH_OK);
    register_a_worker("quiet");
    ucs_error("a second failure");
    EXPECT_FALSE(got.find("'quiet' registered").has_value());
    EXPECT_FALSE(got.find("a second failure").has_value());

    th_set_log_handler(nullptr, nullptr);
    ASSERT_EQ(th_set_log_level(TH_LOG_INFO), TH_OK);
    testing::internal::CaptureStderr();
    register_a_worker("on-stderr");
    stderr_text = testing::internal::GetCapturedStderr();
    EXPECT_NE(stderr_text.find("INFO worker"), std::string::npos) << stderr_text;
    EXPECT_NE(stderr_text.find("'on-stderr' registered"), std::string::npos) << stderr_text;
    EXPECT_FALSE(got.find("'on-stderr' registered").has_value());
}

// Replacing the handler returns once no call to the old one runs: its
// user_data may be freed then.
TEST(Api, ReplacingTheLogHandlerWaitsForTheCallsToTheOldOne) {
    LogRestore restore;
    struct Blocking {
        std::atomic<bool> entered{false}, release{false};
        static void take(th_log_level, const char *, void *user_data) {
            auto *self = static_cast<Blocking *>(user_data);
            self->entered = true;
            while (!self->release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    } blocking;
    th_set_log_handler(Blocking::take, &blocking);
    std::thread logging([] { th::log_write(th::LogLevel::Warn, "held"); });
    while (!blocking.entered) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::atomic<bool> replaced{false};
    std::thread replacing([&] {
        th_set_log_handler(nullptr, nullptr);
        replaced = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(replaced) << "returned while the old handler still ran";
    blocking.release = true;
    replacing.join();
    logging.join();
    EXPECT_TRUE(replaced);
}
