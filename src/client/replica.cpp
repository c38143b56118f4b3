#include "client/replica.hpp"

#include "client/holdings.hpp"
#include "common/error.hpp"
#include "common/log.hpp"

namespace th {

Replica::Replica(Holdings &holder, uint64_t id, std::string model, uint32_t shard, std::vector<Buffer> buffers,
                 UcxWorker &ucx, ControlPage &page, Storage storage)
    : holder_(&holder), ucx_(&ucx), id_(id), model_(std::move(model)), shard_(shard), buffers_(std::move(buffers)),
      storage_(std::move(storage)) {  // storage_ is declared before regions_: initialized first
    try {
        for (const Buffer &buf : buffers_) {
            RegionRef reg = ucx.register_memory(buf.data, buf.spec.nbytes, buf.kind, /*expose=*/true);
            uint32_t idx = 0;
            while (idx < regions_.size() && regions_[idx] != reg) ++idx;
            if (idx == regions_.size()) regions_.push_back(reg);
            desc_.places.push_back({idx, reinterpret_cast<uintptr_t>(buf.data) - reg->base});
        }
        ctrl_ = page.acquire();
    } catch (...) {
        // What was registered for it alone is withdrawn, as for a released replica.
        regions_.clear();
        ucx.withdraw_unused();
        throw;
    }
    regions_.push_back(page.region());
    desc_.ctrl_region = static_cast<uint32_t>(regions_.size() - 1);
    desc_.ctrl_offset = ctrl_.offset;
    desc_.ctrl_generation = ctrl_.word->generation.load();
    desc_.ctrl_bytes = kControlBlockBytes;
    desc_.answers_waiting_reads = true;
    desc_.guards_reads = true;
    for (const RegionRef &reg : regions_)
        desc_.regions.push_back({reg->base, reg->length, reg->rkey, static_cast<uint8_t>(reg->kind)});
}

// A released replica's registrations are withdrawn unless another replica
// still uses them (docs/security.md): the rkeys handed out for it stop working.
Replica::~Replica() {
    if (holder_ == nullptr) return;  // detached at shutdown
    // An owned copy is destroyed by its holdings, which forgot it first (and
    // may hold their lock meanwhile); a handle may be dropped unreleased.
    if (!owned()) holder_->drop_unreleased(*this);
    drop_successions();
    regions_.clear();
    ucx_->withdraw_unused();
}

void Replica::end_generation() {
    uint64_t g = desc_.ctrl_generation;
    uint64_t expected = g;
    if (!ctrl_.word->generation.compare_exchange_strong(expected, g + 1)) return;
    // Its buffers' registrations: the control page's answers (its last
    // region, shared with every replica) are not its bytes.
    if (regions_.empty()) return;  // detached: its context is gone, nothing is answered
    drop_successions();
    std::vector<RegionRef> buffers(regions_.begin(), regions_.end() - 1);
    if (Registry::answers_finished(buffers, kAnswersFinishMs)) return;
    mark_unsettled();
    TH_LOG(Warn, "replica ", id_, ": answers from its buffers were still being sent ", kAnswersFinishMs,
           " ms after it changed (a reader that stopped taking them?): their readers drop them");
}

void Replica::distrust_generation() {
    mark_unsettled();
    uint64_t expected = desc_.ctrl_generation;
    if (ctrl_.word->generation.compare_exchange_strong(expected, expected + 1) && !regions_.empty())
        drop_successions();
}

void Replica::drop_successions() {
    if (!predecessors_.empty()) ucx_->drop_successions_to(reinterpret_cast<uintptr_t>(ctrl_.word), desc_.ctrl_generation);
}

// The generations it answered for are marked too: their readers read their
// words, not its own. A predecessor's slot may serve a later replica by now;
// marking an earlier generation there changes nothing for that one.
void Replica::mark_unsettled() {
    ctrl_.word->mark_unsettled(desc_.ctrl_generation);
    for (auto [word, generation] : predecessors_) word->mark_unsettled(generation);
}

void Replica::succeed(const Replica &from) {
    if (regions_.empty() || from.regions_.empty()) return;  // detached
    Succession s;
    s.gen_at = reinterpret_cast<uintptr_t>(from.ctrl_.word);
    s.generation = from.desc_.ctrl_generation;
    s.to_gen_at = reinterpret_cast<uintptr_t>(ctrl_.word);
    s.to_generation = desc_.ctrl_generation;
    if (from.specs() != specs()) fail(TH_ERR_INTERNAL, "a copy with other buffers than its replica");
    for (size_t i = 0; i < buffers_.size(); ++i) {
        s.ranges.push_back({reinterpret_cast<uintptr_t>(from.buffers_[i].data), from.buffers_[i].spec.nbytes,
                            from.buffer_region(i)->rkey, reinterpret_cast<uintptr_t>(buffers_[i].data),
                            buffer_region(i)->rkey});
    }
    predecessors_.emplace_back(from.ctrl_.word, from.desc_.ctrl_generation);
    ucx_->add_succession(std::move(s));
}

std::vector<TensorSpec> Replica::specs() const {
    std::vector<TensorSpec> out;
    for (const Buffer &b : buffers_) out.push_back(b.spec);
    return out;
}

void Replica::set_version(uint64_t version, uint32_t num_shards, uint64_t chunk_bytes) {
    version_ = version;
    num_shards_ = num_shards;
    chunk_bytes_ = chunk_bytes;
}

std::vector<std::vector<ChunkPiece>> Replica::chunk_pieces(const std::vector<uint32_t> &chunks) const {
    Layout layout(specs(), chunk_bytes_);
    std::vector<std::vector<ChunkPiece>> out;
    for (uint32_t c : chunks) {
        if (c >= layout.num_chunks()) fail(TH_ERR_INVALID_ARG, "chunk ", c, " is past the shard's ", layout.num_chunks());
        std::vector<ChunkPiece> &pieces = out.emplace_back();
        for (const Segment &s : layout.segments(layout.chunk_begin(c), layout.chunk_end(c))) {
            const Buffer &b = buffers_[s.tensor];
            pieces.push_back({static_cast<const uint8_t *>(b.data) + s.offset, s.length, b.kind});
        }
    }
    return out;
}

std::vector<std::vector<ChunkPiece>> Replica::chunk_pieces() const {
    std::vector<uint32_t> all(Layout(specs(), chunk_bytes_).num_chunks());
    for (uint32_t c = 0; c < all.size(); ++c) all[c] = c;
    return chunk_pieces(all);
}

void Replica::detach() {
    holder_ = nullptr;
    regions_.clear();
}

}  // namespace th
