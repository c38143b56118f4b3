#include "client/fetch_source.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "common/error.hpp"
#include "common/stripes.hpp"
#include "common/trace.hpp"

namespace th {

void Mailbox::post(const ReadEvent &e) {
    {
        std::lock_guard lk(mu);
        events.push_back(e);
    }
    cv.notify_one();
}

void Mailbox::wake() {
    {
        std::lock_guard lk(mu);
        woken = true;
    }
    cv.notify_one();
}

std::deque<ReadEvent> Mailbox::take(std::chrono::microseconds wait) {
    std::deque<ReadEvent> out;
    std::unique_lock lk(mu);
    cv.wait_for(lk, wait, [&] { return !events.empty() || woken; });
    woken = false;
    out.swap(events);
    return out;
}

void FetchSource::read_control_word(UcxWorker &ucx, const std::shared_ptr<Mailbox> &box, uint64_t seq) {
    ctrl_inflight = true;
    ctrl_issue_seq = seq;
    ctrl_at = Clock::now();
    struct Op {
        std::shared_ptr<Mailbox> box;
        FetchSource *source;
        uint32_t bytes, num_chunks;
        alignas(64) uint8_t block[kGuardedBlockBytes];
    };
    auto op = std::make_shared<Op>();
    op->box = box;
    op->source = this;
    op->num_chunks = num_chunks;
    // A filling source's per-stripe levels come with the word, where it has them.
    // and with guarded reads, the unsettled generation.
    op->bytes = guarded ? kGuardedBlockBytes
                        : !complete && desc.ctrl_bytes >= kControlBlockBytes ? kControlBlockBytes : kControlWordBytes;
    const RegionDesc &reg = desc.regions[desc.ctrl_region];
    trace::event("ctrl_ask", worker, reg.address + desc.ctrl_offset);
    ucx.read(peer, Lane::Control, op->block, op->bytes, nullptr, reg.address + desc.ctrl_offset, reg.rkey,
             [op](const char *error) {
                 ReadEvent e{ReadEvent::Ctrl, op->source, 0, error};
                 if (error == nullptr) {
                     std::memcpy(&e.generation, op->block, 8);
                     e.level = FillLevel::decode(op->block, op->bytes, op->num_chunks);
                     if (op->bytes >= kGuardedBlockBytes) std::memcpy(&e.unsettled, op->block + kUnsettledAt, 8);
                 }
                 op->box->post(e);
             });
}

void FetchSource::read_chunks(UcxWorker &ucx, const std::shared_ptr<Mailbox> &box, uint32_t first, uint32_t count,
                              const std::vector<Piece> &pieces, bool wait) {
    struct Op {
        std::shared_ptr<Mailbox> box;
        FetchSource *source;
        uint32_t chunk, count;
        std::atomic<size_t> left;
        std::atomic<const char *> error{nullptr};
        Clock::time_point asked = Clock::now();
        bool waited = false;
    };
    auto op = std::make_shared<Op>();
    op->box = box;
    op->source = this;
    op->chunk = first;
    op->count = count;
    op->left = pieces.size();
    op->waited = wait;
    chunk_inflight++;
    std::optional<WaitFor> cond;
    if (wait) {
        waiting++;
        cond = wait_for(first);
    } else if (guarded) {
        // The source holds it (its word said so): the holder checks that it
        // still does, at this generation, and answers at once either way.
        cond = wait_for(first + count - 1);
        cond->park = false;
    }
    for (const Piece &p : pieces) {
        const PlaceDesc &place = desc.places[p.tensor];
        uint64_t remote = desc.regions[place.region].address + place.offset + p.offset;
        ucx.read(peer, Lane::Data, p.local, p.length, p.region, remote, desc.regions[place.region].rkey,
                 [op](const char *error) {
                     if (error != nullptr) op->error = error;
                     if (--op->left == 0) {
                         ReadEvent e{ReadEvent::Chunk, op->source, op->chunk, op->error.load(), op->count};
                         e.latency = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - op->asked);
                         e.waited = op->waited;
                         op->box->post(e);
                     }
                 }, cond);
    }
}

// The generation named is the replica's (its word must still show it, even
// before this reader read the word once).
WaitFor FetchSource::wait_for(uint32_t c) const {
    const RegionDesc &reg = desc.regions[desc.ctrl_region];
    uint64_t at = reg.address + desc.ctrl_offset;
    uint64_t g = desc.ctrl_generation;
    if (level_stripes >= 2) {
        uint32_t i = stripe_of(num_chunks, level_stripes, c);
        return WaitFor{at + kStripeDoneAt + 4 * i, at, g, c - stripe_begin(num_chunks, level_stripes, i) + 1};
    }
    return WaitFor{at + kLeadingAt, at, g, c + 1};
}

std::string FetchSource::check_generation(uint64_t generation) {
    if (!gen_known) {
        // The word must still be this replica's: a released replica's slot
        // may already serve the next version from the same buffers.
        if (generation != desc.ctrl_generation)
            return generation & 1 ? "its buffers are being modified"
                                  : str("it was released (generation ", desc.ctrl_generation, " -> ", generation, ")");
        gen_known = true;
    } else if (generation != desc.ctrl_generation) {
        return str("its buffers changed while being read (generation ", desc.ctrl_generation, " -> ", generation, ")");
    }
    return "";
}

uint32_t chunks_per_read(std::chrono::microseconds fastest, uint64_t chunk_bytes) {
    uint64_t most = std::max<uint64_t>(1, kMaxMergedBytes / std::max<uint64_t>(chunk_bytes, 1));
    auto per_chunk = std::max(fastest, std::chrono::microseconds(1));
    return static_cast<uint32_t>(std::clamp<uint64_t>(kMergeTarget / per_chunk, 1, most));
}

void FetchSource::on_read(std::chrono::microseconds latency, uint32_t count) {
    auto per_chunk = std::max(latency / count, std::chrono::microseconds(1));
    window.on_complete(per_chunk);
    // The quickest chunk seen: a read with nothing queued ahead of it.
    if (peer && peer->path() == ReadPath::OneSided) fastest = std::min(fastest, per_chunk);
}

void FetchSource::saw_fill_level(const FillLevel &level) {
    level_stripes = level.stripes;
    uint32_t held = level.held_until(next, end, num_chunks);
    if (held > avail) {
        avail = held;
        last_progress = Clock::now();
        follow_poll = kFollowPollMin;
    } else if (next >= avail) {
        follow_poll = std::min(kFollowPollMax, follow_poll * 2);
    }
}

// avail may be past c only because reads waited ahead of the source's level
// (saw_fill_level never puts it below next), and every chunk below avail is
// read as held, whatever the source's buffer holds: it comes down to c.
void FetchSource::not_yet(uint32_t c) {
    waits_ok = false;
    next = std::min(next, c);
    avail = std::min(avail, c);
}

uint32_t reads_in_flight_limit(uint32_t max_inflight, uint32_t stripes) {
    uint64_t n = uint64_t{max_inflight} * std::max<uint32_t>(stripes, 1);
    return static_cast<uint32_t>(std::min<uint64_t>(n, UINT32_MAX));
}

uint32_t stripe_pace_limit(const FetchSource &s, const std::vector<std::unique_ptr<FetchSource>> &sources,
                           uint32_t num_chunks, uint32_t stripes, uint32_t lead) {
    if (s.stripe == FetchSource::kNoStripe) return UINT32_MAX;
    uint32_t least = UINT32_MAX;  // chunks the least advanced other stripe is past its start
    for (const auto &o : sources)
        if (!o->failed && o->stripe != FetchSource::kNoStripe && o->stripe != s.stripe && o->next < o->end)
            least = std::min(least, o->next - stripe_begin(num_chunks, stripes, o->stripe));
    if (least == UINT32_MAX) return UINT32_MAX;
    return stripe_begin(num_chunks, stripes, s.stripe) + least + lead;
}

}  // namespace th
