// Asking a metadata server whether it answers, and with which epoch: a
// client choosing among servers at start, and (list mode) a server asked to
// take over from another, which first checks that the other is gone.
#pragma once

#include <cstdint>
#include <string>

#include "common/deadline.hpp"

namespace th {

// The epoch the server at url answers a Ping with. Throws Error
// (TH_ERR_UNAVAILABLE or TH_ERR_TIMEOUT) when it does not answer by the
// deadline; a refused connection (no process on that port) fails at once
// rather than at the deadline.
uint64_t ping_server(const std::string &url, const std::string &token, const Deadline &deadline);

}  // namespace th
