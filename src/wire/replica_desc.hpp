// What a reader needs to read from one replica: the replica's registered memory
// regions (address + packed rkey), where each tensor lies in them, and where
// its control word is. Travels in Publish, PlanFetch and PlanReply.
#pragma once

#include <cstdint>
#include <vector>

#include "common/layout.hpp"
#include "wire/wire.hpp"

namespace th {

struct RegionDesc {
    uint64_t address = 0;
    uint64_t length = 0;
    std::vector<uint8_t> rkey;
    uint8_t mem_kind = 0;
};

struct PlaceDesc {
    uint32_t region = 0;
    uint64_t offset = 0;
};

// What a reader of a holder that guards reads reads of its control block: the
// 64-byte block and the unsettled word after it (src/client/control_word.hpp).
constexpr uint32_t kGuardedBlockBytes = 72;

struct ReplicaDesc {
    std::vector<RegionDesc> regions;
    std::vector<PlaceDesc> places;  // one per tensor, in layout order
    uint32_t ctrl_region = 0;
    uint64_t ctrl_offset = 0;
    uint64_t ctrl_generation = 0;  // see schemas/tensorhub.fbs
    uint32_t ctrl_bytes = 16;      // 16: the word alone; 64: with per-stripe fill levels
    bool answers_waiting_reads = false;  // see schemas/tensorhub.fbs
    bool guards_reads = false;           // see schemas/tensorhub.fbs
};

namespace wire {
flatbuffers::Offset<wire::ReplicaDesc> put_desc(Builder &b, const th::ReplicaDesc &d);
// Decodes; throws Error(TH_ERR_PROTOCOL) when it is missing or has no region.
th::ReplicaDesc get_desc(const wire::ReplicaDesc *d);
}  // namespace wire

// Checks every tensor and the control word lie inside a region; throws
// Error(TH_ERR_PROTOCOL) otherwise.
void check_desc(const ReplicaDesc &d, const std::vector<TensorSpec> &tensors);

}  // namespace th
