// The registration cache: every buffer this process publishes, serves from or
// reads into is registered with UCX once (ucp_mem_map) and the registration
// is reused while it covers the buffer. A registration whose packed rkey was
// handed to readers ("exposed") is withdrawn as soon as no replica uses it:
// an rkey is the capability to read memory one-sidedly, so none may outlive
// the replica it was handed out for (docs/security.md). Registrations that
// were never exposed (fetch destinations) are kept for reuse, up to a cap.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <ucp/api/ucp.h>

#include "tensorhub/tensorhub.h"

namespace th {

// A registered piece of memory and its packed remote key.
struct MemRegion {
    uintptr_t base = 0;
    uint64_t length = 0;
    th_mem_kind kind = TH_MEM_HOST;
    ucp_mem_h memh = nullptr;
    std::vector<uint8_t> rkey;
    ucp_context_h context = nullptr;
    // Answers being sent from it (active-message path). They hold no
    // reference: whoever withdraws it waits for them before unmapping it.
    std::atomic<int> answering{0};
    // Its answers were already waited for in vain (answers_finished): a
    // reader stopped taking them. Withdrawing it does not wait for them again.
    std::atomic<bool> answers_stuck{false};
    ~MemRegion();
    bool contains(uintptr_t p, uint64_t n) const { return p >= base && n <= length && p - base <= length - n; }
};
using RegionRef = std::shared_ptr<MemRegion>;

// How long withdrawing memory waits for answers still being sent from it.
constexpr uint32_t kAnswersFinishMs = 2000;

class Registry {
  public:
    explicit Registry(ucp_context_h context) : context_(context) {}

    // A registered region covering [ptr, ptr + n), reused from the cache when
    // one covers it. With expose, the region is marked as handed out: it is
    // withdrawn once unused (see withdraw_unused).
    RegionRef register_memory(void *ptr, uint64_t n, th_mem_kind kind, bool expose);
    // Withdraws every exposed registration that no replica uses any more:
    // their rkeys stop working (on transports that check them) before the
    // caller may free or reuse the memory. Returns how many were withdrawn.
    //
    // Withdrawing memory (this, forget and withdraw) lets the answers still
    // being sent from it finish first, up to wait_ms: then the caller may
    // free it. Past that a warning says so and the memory is given up all
    // the same (an answer UCX still sends may then carry what the memory
    // holds next: its reader discards it, the replica's generation changed
    // first); the registration lingers until its answers are done.
    size_t withdraw_unused(uint32_t wait_ms = kAnswersFinishMs);
    // Drops the unused registrations starting at base: call before freeing
    // memory the library allocated.
    void forget(const void *base);
    // The region in use with this packed rkey that holds [p, p + n), if any:
    // what a holder may serve, with its `answering` counted up for the
    // caller's answer. Withdrawn registrations are never found. The region
    // stays registered until the caller counts its answer down.
    MemRegion *served(uint64_t p, uint64_t n, const uint8_t *rkey, size_t rkey_len) const;
    // Reads the aligned 4- or 8-byte word at p, if it lies in exposed host
    // memory in use, under the lock that withdraw() takes: memory withdrawn
    // before it is freed is never read. Sequentially consistent: a guard read
    // after served() counted an answer, against a generation changed before
    // its region's answers are counted (answers_finished), sees the change or
    // is seen.
    bool read_word(uint64_t p, uint32_t bytes, uint64_t *out) const;
    // Withdraws region now, used or not: served() and read_word() no
    // longer find it. False if answers from it were still being sent after
    // wait_ms (see withdraw_unused): then it is not to be freed.
    bool withdraw(const MemRegion *region, uint32_t wait_ms = kAnswersFinishMs);
    // Waits up to wait_ms for the answers being sent from regions to finish,
    // leaving them registered: true once none is being sent. What ends a
    // replica's generation waits so before its bytes may change (guarded
    // reads, client/control_word.hpp). Regions still being answered then
    // are marked answers_stuck: withdrawing them later does not wait again.
    static bool answers_finished(const std::vector<RegionRef> &regions, uint32_t wait_ms);
    // A paused worker was set aside with answers still queued on it: it is
    // never progressed again, so they never complete nor touch memory. They
    // no longer hold anything back.
    void abandon_answers();
    size_t size() const;
    // Drops every registration: only once no worker may complete an answer.
    void clear();

  private:
    struct Entry {
        RegionRef region;
        bool exposed = false;
    };
    ucp_context_h context_;
    std::mutex map_mu_;    // one registration at a time; held across ucp_mem_map
    mutable std::mutex mu_;  // guards entries_; never held across a call into UCX
    std::vector<Entry> entries_;
    std::vector<RegionRef> lingering_;  // withdrawn, answers still being sent; guarded by mu_

    // Takes the entries pred says out of the registry (under mu_); the
    // caller lets their answers finish.
    template <class Pred>
    std::vector<RegionRef> take_if(Pred pred);
    // Lets the answers from regions finish (see withdraw_unused); false if
    // some did not. Called without mu_.
    bool let_answers_finish(std::vector<RegionRef> regions, uint32_t wait_ms, const char *what);
};

}  // namespace th
