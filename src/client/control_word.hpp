// The small registered word every replica exposes to its readers:
// {generation, chunks_done}. A reader reads it before and after reading chunks
// (a seqlock): the generation turns odd before the replica's bytes change, so a
// reader that sees it change discards what it read. chunks_done is the number
// of leading chunks a still-filling replica already holds.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "transport/worker.hpp"

namespace th {

struct alignas(16) ControlWord {
    std::atomic<uint64_t> generation;
    std::atomic<uint64_t> chunks_done;
};
static_assert(sizeof(ControlWord) == 16);

// A registered page of control words handed out to replicas. Slots are reused,
// but a slot's generation only ever grows, so a reader of an old replica never
// mistakes the next tenant's word for its own.
class ControlPage {
  public:
    explicit ControlPage(UcxWorker &ucx, size_t slots = 4096);
    ~ControlPage();

    struct Slot {
        ControlWord *word;
        uint64_t offset;  // inside region()
    };
    Slot acquire();  // the word starts at an even generation, chunks_done 0
    void release(ControlWord *word);
    const RegionRef &region() const { return region_; }

  private:
    ControlWord *words_ = nullptr;
    size_t slots_;
    RegionRef region_;
    std::mutex mu_;
    std::vector<uint32_t> free_;
};

}  // namespace th
