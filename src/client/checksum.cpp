#include "client/checksum.hpp"

#include <xxhash.h>

#include <algorithm>
#include <memory>

#include "common/error.hpp"
#include "transport/memory_kind.hpp"

namespace th {

namespace {

constexpr uint64_t kStageBytes = 4u << 20;

struct StateDeleter {
    void operator()(XXH3_state_t *s) const { XXH3_freeState(s); }
};

}  // namespace

uint64_t checksum(const std::vector<ChunkPiece> &pieces) {
    if (pieces.size() == 1 && pieces[0].kind == TH_MEM_HOST) return XXH3_64bits(pieces[0].data, pieces[0].length);
    std::unique_ptr<XXH3_state_t, StateDeleter> state(XXH3_createState());
    if (!state || XXH3_64bits_reset(state.get()) != XXH_OK) fail(TH_ERR_NO_MEMORY, "cannot start a checksum");
    std::vector<uint8_t> stage;
    for (const ChunkPiece &p : pieces) {
        if (p.kind == TH_MEM_HOST) {
            XXH3_64bits_update(state.get(), p.data, p.length);
            continue;
        }
        stage.resize(std::min(p.length, kStageBytes));
        for (uint64_t off = 0; off < p.length; off += stage.size()) {
            uint64_t n = std::min<uint64_t>(stage.size(), p.length - off);
            copy_to_host(stage.data(), static_cast<const uint8_t *>(p.data) + off, n, p.kind);
            XXH3_64bits_update(state.get(), stage.data(), n);
        }
    }
    return XXH3_64bits_digest(state.get());
}

}  // namespace th
