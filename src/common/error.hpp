// Errors inside the library are exceptions carrying a th_status; the C API
// boundary turns them into a status code plus the thread-local message.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "tensorhub/tensorhub.h"

namespace th {

// The most negative th_status defined: codes from a peer below it are unknown.
constexpr int kLowestStatus = TH_ERR_CANCELED;

class Error : public std::runtime_error {
  public:
    Error(th_status code, const std::string &message)
        : std::runtime_error(message), code_(code) {}
    th_status code() const noexcept { return code_; }

  private:
    th_status code_;
};

// Concatenates its arguments with operator<<: str("bad shard ", 3).
template <typename... Args>
std::string str(Args &&...args) {
    std::ostringstream os;
    (os << ... << std::forward<Args>(args));
    return os.str();
}

template <typename... Args>
[[noreturn]] void fail(th_status code, Args &&...args) {
    throw Error(code, str(std::forward<Args>(args)...));
}

// Records the message returned by th_last_error() on this thread.
void set_last_error(std::string message);
const char *last_error();

// Runs fn, converting any exception into a status + last error. Used by every
// extern "C" function body.
template <typename Fn>
th_status guard(Fn &&fn) noexcept {
    try {
        fn();
        set_last_error({});
        return TH_OK;
    } catch (const Error &e) {
        set_last_error(e.what());
        return e.code();
    } catch (const std::bad_alloc &) {
        set_last_error("out of memory");
        return TH_ERR_NO_MEMORY;
    } catch (const std::exception &e) {
        set_last_error(str("internal error: ", e.what()));
        return TH_ERR_INTERNAL;
    } catch (...) {
        set_last_error("internal error: unknown exception");
        return TH_ERR_INTERNAL;
    }
}

}  // namespace th
