// Minimal leveled logging to stderr. The level comes from TENSORHUB_LOG_LEVEL
// (error, warn, info, debug; default warn).
#pragma once

#include "common/error.hpp"

namespace th {

enum class LogLevel { Error = 0, Warn = 1, Info = 2, Debug = 3 };

LogLevel log_level();
void log_write(LogLevel level, const std::string &message);

}  // namespace th

#define TH_LOG(level, ...)                                                  \
    do {                                                                    \
        if (static_cast<int>(::th::LogLevel::level) <=                      \
            static_cast<int>(::th::log_level()))                            \
            ::th::log_write(::th::LogLevel::level, ::th::str(__VA_ARGS__)); \
    } while (0)
