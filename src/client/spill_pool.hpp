// Host memory for owned copies (the retention policy's spill), made ready
// before it is needed: a spill is then a memcpy into pages that are already
// faulted in and registered with UCX, not a fresh allocation whose pages the
// kernel zeroes on first touch while transfers compete for the same cores.
//
// Slabs are sized from published layouts: each publish asks for a spare slab
// of its size, which a thread of the pool allocates (MAP_POPULATE), registers
// and keeps. A slab given back after its copy was dropped is registered anew
// (the rkeys handed out for the copy stop working, docs/security.md) and
// reused by the next spill. All slabs together never exceed the cap.
//
// Thread-safe. The pool must outlive every Lease it handed out.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "transport/worker.hpp"

namespace th {

class SpillPool {
    struct Slab;

  public:
    // cap_bytes: the most memory all slabs may hold; 0: no limit.
    SpillPool(UcxWorker &ucx, uint64_t cap_bytes);
    ~SpillPool();
    SpillPool(const SpillPool &) = delete;
    SpillPool &operator=(const SpillPool &) = delete;

    // A slab lent to one owned copy; gives it back when destroyed.
    class Lease {
      public:
        Lease() = default;
        Lease(Lease &&o) noexcept : pool_(o.pool_), slab_(o.slab_) { o.slab_ = nullptr; }
        Lease &operator=(Lease &&o) noexcept;
        ~Lease() { reset(); }
        uint8_t *data() const;
        explicit operator bool() const { return slab_ != nullptr; }
        void reset();

      private:
        friend class SpillPool;
        Lease(SpillPool *pool, Slab *slab) : pool_(pool), slab_(slab) {}
        SpillPool *pool_ = nullptr;
        Slab *slab_ = nullptr;
    };

    // Whether a free slab of at least n bytes is ready now.
    bool has_free(uint64_t n) const;
    // Makes sure a free slab of at least n bytes exists or is being made,
    // unless the cap forbids it; returns at once.
    void prepare(uint64_t n);
    // A free slab of at least n bytes: a ready one, else the one being made
    // for it, else one made now. Throws Error(TH_ERR_NO_MEMORY) saying what
    // holds the pool when the cap leaves no room.
    Lease acquire(uint64_t n);

    struct Usage {
        uint64_t cap = 0;     // 0: no limit
        uint64_t held = 0;    // bytes of every slab, lent or not
        uint64_t lent = 0;    // bytes of slabs lent to owned copies
        size_t slabs = 0;
    };
    Usage usage() const;

  private:
    struct Slab {
        uint8_t *base = nullptr;
        uint64_t bytes = 0;
        RegionRef region;    // null while it is being (re)registered
        RegionRef retiring;  // the registration of the copy given back
        bool lent = false;
    };
    static uint64_t round_up(uint64_t n);
    void give_back(Slab *s);
    void worker_loop();
    // Allocates, faults in and registers a slab. Called without mu_.
    std::unique_ptr<Slab> make_slab(uint64_t bytes);
    // Replaces a given-back slab's registration (its rkeys die). Without mu_.
    void register_slab_anew(Slab &s);
    void free_slab(Slab &s);
    // The smallest ready, free slab of at least n bytes (mu_ held).
    Slab *find_free(uint64_t n) const;
    // Whether a slab of at least n bytes is being made or registered anew
    // (mu_ held).
    bool coming(uint64_t n) const;
    bool room_for(uint64_t n) const { return cap_ == 0 || held_ + n <= cap_; }

    UcxWorker &ucx_;
    const uint64_t cap_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::vector<std::unique_ptr<Slab>> slabs_;
    uint64_t held_ = 0;       // bytes of slabs_ plus slabs being made
    std::deque<uint64_t> to_make_;  // sizes the thread will make
    std::deque<Slab *> to_renew_;   // given back: register anew
    uint64_t making_ = 0;           // size the thread is making now (0: none)
    bool stop_ = false;
    std::thread thread_;
};

}  // namespace th
