// UCX's own log lines (its warnings and errors: "connection establishment
// ... was unsuccessful" each time a peer that died is dialled) go through
// tensorhub's log (common/log.hpp) at Info, as "ucx: ...": the library
// reports every failure that matters itself, and the application's log
// handler sees UCX's lines too. A user who set UCX_LOG_LEVEL gets UCX's own
// printing, untouched.
#pragma once

namespace th {

// Installs the routing once per process; later calls do nothing.
void route_ucx_log();

}  // namespace th
