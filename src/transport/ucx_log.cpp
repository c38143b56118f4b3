#include "transport/ucx_log.hpp"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include <ucs/debug/log_def.h>

#include "common/log.hpp"

namespace th {

namespace {

ucs_log_func_rc_t to_tensorhub(const char *file, unsigned line, const char *function, ucs_log_level_t level,
                               const ucs_log_component_config_t *component, const char *format, va_list ap) {
    // What UCX's own handler would leave out, it still leaves out; before
    // it aborts the process, it says why in its own words.
    if ((level > component->log_level && level != UCS_LOG_LEVEL_PRINT) || level == UCS_LOG_LEVEL_FATAL)
        return UCS_LOG_FUNC_RC_CONTINUE;
    LogLevel ours = level <= UCS_LOG_LEVEL_WARN || level == UCS_LOG_LEVEL_PRINT ? LogLevel::Info : LogLevel::Debug;
    if (static_cast<int>(ours) > static_cast<int>(log_level())) return UCS_LOG_FUNC_RC_STOP;
    char text[1024];
    std::vsnprintf(text, sizeof text, format, ap);
    const char *base = file;
    for (const char *p = file; p != nullptr && *p != '\0'; ++p)
        if (*p == '/') base = p + 1;
    log_write(ours, str("ucx: ", text, " (", component->name, " ", base != nullptr ? base : "?", ":", line, ")"));
    return UCS_LOG_FUNC_RC_STOP;
}

}  // namespace

void route_ucx_log() {
    static std::once_flag once;
    std::call_once(once, [] {
        if (std::getenv("UCX_LOG_LEVEL") != nullptr) return;
        ucs_log_push_handler(to_tensorhub);
    });
}

}  // namespace th
