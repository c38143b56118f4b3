#include "common/log.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <unistd.h>

namespace th {

LogLevel log_level() {
    static const LogLevel level = [] {
        const char *env = std::getenv("TENSORHUB_LOG_LEVEL");
        if (env == nullptr) return LogLevel::Warn;
        if (std::strcmp(env, "error") == 0) return LogLevel::Error;
        if (std::strcmp(env, "info") == 0) return LogLevel::Info;
        if (std::strcmp(env, "debug") == 0) return LogLevel::Debug;
        return LogLevel::Warn;
    }();
    return level;
}

void log_write(LogLevel level, const std::string &message) {
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
