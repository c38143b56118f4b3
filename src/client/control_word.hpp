// The small registered word every replica exposes to its readers:
// {generation, chunks_done}. A reader reads it before and after reading chunks
// (a seqlock): the generation turns odd before the replica's bytes change, so a
// reader that sees it change discards what it read. chunks_done is the number
// of leading chunks a still-filling replica already holds.
//
// The word is the head of a 64-byte block: a replica filled stripe by stripe
// (docs/design.md, "Fan-out depth") also says, per stripe, how many of the
// stripe's leading chunks it holds, so that readers of one stripe follow it
// before the stripes ahead of it are done. Readers of older versions read the
// first 16 bytes only, which keep their meaning.
//
// After the block, the slot's `unsettled` word serves guarded reads
// (docs/design.md, "Guarded reads"): on the active-message path a reader may
// name the generation it knows in each read; the holder answers only while
// that generation holds, and before the bytes may change it lets the answers
// already being sent finish. When some do not finish in time it raises
// `unsettled` to that generation first. So a reader keeps what guarded reads
// of generation g returned, even once g has ended, as long as a read of the
// word made after they landed shows unsettled < g, or they completed within
// half the holder's wait (FetchSource::trusts). The word only grows, and
// a slot's generations only grow: a later tenant of the slot never makes an
// earlier generation look settled.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "common/stripes.hpp"
#include "transport/worker.hpp"
#include "wire/replica_desc.hpp"

namespace th {

struct alignas(64) ControlWord {
    std::atomic<uint64_t> generation;
    std::atomic<uint64_t> chunks_done;
    std::atomic<uint32_t> stripes;  // 0: no per-stripe levels, read chunks_done
    std::atomic<uint32_t> stripe_done[kMaxStripes];  // chunks held from each stripe's start
    // The slot's highest generation whose guarded answers were not all
    // finished when it ended (0: none). Outlives tenants of the slot.
    std::atomic<uint64_t> unsettled;

    // Generation g ended with guarded answers still being sent.
    void mark_unsettled(uint64_t g);
};
static_assert(sizeof(ControlWord) == 128);
// Where a reader finds the fields in a block it read, or names them to the
// holder in a waiting read (WaitFor): the low half of chunks_done (chunks are
// counted in 32 bits), the stripe count, stripe i's level at 4 * i past that.
constexpr uint32_t kLeadingAt = 8;
constexpr uint32_t kStripesAt = 16;
constexpr uint32_t kStripeDoneAt = 20;
// What a reader reads of a source's block: the word alone, or all of it, or
// (guarded reads) all of it and the unsettled word.
constexpr uint32_t kControlWordBytes = 16;
constexpr uint32_t kControlBlockBytes = 64;
constexpr uint32_t kUnsettledAt = 64;
static_assert(offsetof(ControlWord, unsettled) == kUnsettledAt && kGuardedBlockBytes == kUnsettledAt + 8);

// How far a source holds a shard's chunks, as its control block says.
struct FillLevel {
    uint32_t leading = 0;  // chunks_done
    uint32_t stripes = 0;  // 0: leading only
    uint32_t done[kMaxStripes] = {};

    // Decodes a block read from a source (the word only when bytes == 16);
    // a count above kMaxStripes, from a peer that writes no such thing, means
    // no per-stripe levels.
    static FillLevel decode(const uint8_t *block, uint32_t bytes, uint32_t num_chunks);
    // The end of the run of chunks held from `from`, at most `end`.
    uint32_t held_until(uint32_t from, uint32_t end, uint32_t num_chunks) const;
};

// A registered page of control words handed out to replicas. Slots are reused,
// but a slot's generation only ever grows, so a reader of an old replica never
// mistakes the next tenant's word for its own. That holds across clients too:
// a page is never freed, the next client of the process takes it over.
class ControlPage {
  public:
    explicit ControlPage(UcxWorker &ucx, size_t slots = 4096);
    ~ControlPage();

    struct Slot {
        ControlWord *word;
        uint64_t offset;  // inside region()
    };
    Slot acquire();  // the word starts at an even generation, nothing held
    void release(ControlWord *word);
    const RegionRef &region() const { return region_; }

  private:
    UcxWorker &ucx_;
    ControlWord *words_ = nullptr;
    size_t slots_;
    RegionRef region_;
    std::mutex mu_;
    std::vector<uint32_t> free_;
};

}  // namespace th
