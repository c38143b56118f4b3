// Leveled logging. Lines go to stderr, or to the handler the application set
// (th_set_log_handler). The level comes from TENSORHUB_LOG_LEVEL (error, warn,
// info, debug; default warn) until set_log_level changes it.
#pragma once

#include "common/error.hpp"

namespace th {

enum class LogLevel { Error = TH_LOG_ERROR, Warn = TH_LOG_WARN, Info = TH_LOG_INFO, Debug = TH_LOG_DEBUG };

LogLevel log_level();
void set_log_level(LogLevel level);
// Returns once no call to the previous handler is running (th_set_log_handler).
void set_log_handler(th_log_fn fn, void *user_data);
void log_write(LogLevel level, const std::string &message);

}  // namespace th

#define TH_LOG(level, ...)                                                  \
    do {                                                                    \
        if (static_cast<int>(::th::LogLevel::level) <=                      \
            static_cast<int>(::th::log_level()))                            \
            ::th::log_write(::th::LogLevel::level, ::th::str(__VA_ARGS__)); \
    } while (0)
