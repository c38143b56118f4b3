#include "common/log.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <shared_mutex>
#include <unistd.h>

namespace th {

namespace {

LogLevel level_from_env() {
    const char *env = std::getenv("TENSORHUB_LOG_LEVEL");
    if (env == nullptr) return LogLevel::Warn;
    if (std::strcmp(env, "error") == 0) return LogLevel::Error;
    if (std::strcmp(env, "info") == 0) return LogLevel::Info;
    if (std::strcmp(env, "debug") == 0) return LogLevel::Debug;
    return LogLevel::Warn;
}

std::atomic<int> &level_now() {
    static std::atomic<int> level{static_cast<int>(level_from_env())};
    return level;
}

// The handler is called under the shared lock, so that replacing it (under
// the exclusive one) returns only once no call to the old one is running.
// Never destroyed: threads may log while the process exits.
struct Sink {
    std::shared_mutex mu;
    th_log_fn fn = nullptr;
    void *user_data = nullptr;
};

Sink &sink() {
    static auto *s = new Sink;
    return *s;
}

}  // namespace

LogLevel log_level() { return static_cast<LogLevel>(level_now().load(std::memory_order_relaxed)); }

void set_log_level(LogLevel level) { level_now().store(static_cast<int>(level), std::memory_order_relaxed); }

void set_log_handler(th_log_fn fn, void *user_data) {
    std::unique_lock lk(sink().mu);
    sink().fn = fn;
    sink().user_data = user_data;
}

void log_write(LogLevel level, const std::string &message) {
    {
        std::shared_lock lk(sink().mu);
        if (sink().fn != nullptr) {
            sink().fn(static_cast<th_log_level>(level), message.c_str(), sink().user_data);
            return;
        }
    }
    static const char *names[] = {"ERROR", "WARN", "INFO", "DEBUG"};
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    tm tm{};
    gmtime_r(&ts.tv_sec, &tm);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%H:%M:%S", &tm);
    // One fprintf call so that lines from different threads do not interleave.
    std::fprintf(stderr, "%s.%03ld tensorhub[%d] %s %s\n", stamp, ts.tv_nsec / 1000000L,
                 static_cast<int>(getpid()), names[static_cast<int>(level)], message.c_str());
}

}  // namespace th
