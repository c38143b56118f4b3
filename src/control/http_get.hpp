// One HTTP GET with NNG's HTTP client, for reading a server's /api/status.
#pragma once

#include <cstdint>
#include <string>

namespace th {

// The body of GET url, or throws: TH_ERR_UNAVAILABLE when the server cannot be
// reached, TH_ERR_TIMEOUT past timeout_ms, TH_ERR_PROTOCOL for a status other
// than 200.
std::string http_get(const std::string &url, uint32_t timeout_ms);

}  // namespace th
