// The status document (StatusReply: workers, models, versions, shards,
// replicas, reads done and in flight), built from the catalog. It is what
// th_status_json, the CLI and the live page show.
#pragma once

#include <cstdint>

#include "server/catalog.hpp"
#include "wire/wire.hpp"

namespace th {

// The reply to h (whose epoch it reports) at now_ms, from a server that
// started at started_ms.
wire::Bytes status_reply(const Catalog &catalog, const wire::Header &h, uint64_t now_ms, uint64_t started_ms);

}  // namespace th
