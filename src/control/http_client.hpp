// One HTTP request with NNG's HTTP client: GET for reading a server's
// /api/status, POST for etcd's JSON gateway (control/etcd.hpp).
#pragma once

#include <cstdint>
#include <string>

namespace th {

// The body of GET url, or throws: TH_ERR_UNAVAILABLE when the server cannot be
// reached, TH_ERR_TIMEOUT past timeout_ms, TH_ERR_PROTOCOL for a status other
// than 200.
std::string http_get(const std::string &url, uint32_t timeout_ms);

// The body of POST url with a JSON body; fails as http_get does.
std::string http_post_json(const std::string &url, const std::string &body, uint32_t timeout_ms);

}  // namespace th
