#include "client/spill_pool.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/thread_name.hpp"
#include "common/trace.hpp"

namespace th {

namespace {

// Slabs are whole huge pages: transparent huge pages fault in and copy
// faster, and sizes that differ by a few bytes share slabs.
constexpr uint64_t kSlabAlign = 2u << 20;

// How long a given-back slab waits for the last user of its old registration
// (an answer still being sent from it) before it is registered anew anyway.
constexpr int kRenewTries = 200;
constexpr auto kRenewPause = std::chrono::milliseconds(5);

std::string mib(uint64_t bytes) { return str(bytes >> 20, " MiB"); }

}  // namespace

SpillPool::Lease &SpillPool::Lease::operator=(Lease &&o) noexcept {
    if (this != &o) {
        reset();
        pool_ = o.pool_;
        slab_ = o.slab_;
        o.slab_ = nullptr;
    }
    return *this;
}

uint8_t *SpillPool::Lease::data() const { return slab_ ? slab_->base : nullptr; }

void SpillPool::Lease::reset() {
    if (slab_ != nullptr) pool_->give_back(slab_);
    slab_ = nullptr;
}

SpillPool::SpillPool(UcxWorker &ucx, uint64_t cap_bytes) : ucx_(ucx), cap_(cap_bytes) {
    thread_ = std::thread([this] {
        name_this_thread("th-spill");
        worker_loop();
    });
}

SpillPool::~SpillPool() {
    {
        std::lock_guard lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    for (auto &s : slabs_) {
        if (s->lent) TH_LOG(Warn, "spill pool destroyed with a slab still lent");
        free_slab(*s);
    }
}

uint64_t SpillPool::round_up(uint64_t n) { return (std::max<uint64_t>(n, 1) + kSlabAlign - 1) / kSlabAlign * kSlabAlign; }

SpillPool::Slab *SpillPool::find_free(uint64_t n) const {
    Slab *best = nullptr;
    for (auto &s : slabs_)
        if (!s->lent && s->region && s->bytes >= n && (!best || s->bytes < best->bytes)) best = s.get();
    return best;
}

bool SpillPool::coming(uint64_t n) const {
    if (making_ >= n) return true;
    if (std::any_of(to_make_.begin(), to_make_.end(), [&](uint64_t m) { return m >= n; })) return true;
    return std::any_of(slabs_.begin(), slabs_.end(), [&](auto &s) { return !s->lent && !s->region && s->bytes >= n; });
}

bool SpillPool::has_free(uint64_t n) const {
    std::lock_guard lk(mu_);
    return find_free(round_up(n)) != nullptr;
}

void SpillPool::prepare(uint64_t n) {
    uint64_t want = round_up(n);
    std::lock_guard lk(mu_);
    if (find_free(want) || coming(want)) return;
    if (!room_for(want)) {
        TH_LOG(Debug, "spill pool: no room for a spare slab of ", mib(want), " under the cap of ", mib(cap_));
        return;
    }
    held_ += want;
    to_make_.push_back(want);
    cv_.notify_all();
}

SpillPool::Lease SpillPool::acquire(uint64_t n) {
    uint64_t want = round_up(n);
    std::unique_lock lk(mu_);
    for (;;) {
        if (Slab *s = find_free(want)) {
            s->lent = true;
            return Lease(this, s);
        }
        if (coming(want)) {
            cv_.wait(lk);
            continue;
        }
        // Make room by freeing idle slabs too small for this copy.
        for (auto it = slabs_.begin(); !room_for(want) && it != slabs_.end();) {
            Slab &s = **it;
            if (!s.lent && s.region) {
                held_ -= s.bytes;
                free_slab(s);
                it = slabs_.erase(it);
            } else {
                ++it;
            }
        }
        if (!room_for(want)) {
            // A slab being made or registered anew may be one to free: wait
            // for it rather than refuse.
            bool settling = making_ != 0 || !to_make_.empty() ||
                            std::any_of(slabs_.begin(), slabs_.end(), [](auto &s) { return !s->lent && !s->region; });
            if (settling) {
                cv_.wait(lk);
                continue;
            }
            uint64_t lent = 0;
            for (auto &s : slabs_) lent += s->lent ? s->bytes : 0;
            fail(TH_ERR_NO_MEMORY, "the spill pool's cap of ", mib(cap_), " leaves no room for an owned copy of ",
                 mib(want), ": ", mib(lent), " are held by owned copies of required versions (raise spill_pool_bytes, "
                 "unpin versions, or let readers finish)");
        }
        held_ += want;
        lk.unlock();
        TH_LOG(Info, "spill pool: no slab of ", mib(want), " was ready; allocating one now");
        std::unique_ptr<Slab> made;
        try {
            made = make_slab(want);
        } catch (...) {
            lk.lock();
            held_ -= want;
            throw;
        }
        lk.lock();
        made->lent = true;
        Slab *s = made.get();
        slabs_.push_back(std::move(made));
        return Lease(this, s);
    }
}

void SpillPool::give_back(Slab *s) {
    std::lock_guard lk(mu_);
    s->lent = false;
    s->retiring = std::move(s->region);  // not lent again under its old rkeys
    to_renew_.push_back(s);
    cv_.notify_all();
}

SpillPool::Usage SpillPool::usage() const {
    std::lock_guard lk(mu_);
    Usage u;
    u.cap = cap_;
    u.slabs = slabs_.size();
    for (auto &s : slabs_) {
        u.held += s->bytes;
        u.lent += s->lent ? s->bytes : 0;
    }
    return u;
}

void SpillPool::worker_loop() {
    std::unique_lock lk(mu_);
    for (;;) {
        cv_.wait(lk, [&] { return stop_ || !to_make_.empty() || !to_renew_.empty(); });
        if (stop_) return;
        if (!to_renew_.empty()) {
            Slab *s = to_renew_.front();
            to_renew_.pop_front();
            lk.unlock();
            register_slab_anew(*s);
            lk.lock();
            cv_.notify_all();
            continue;
        }
        uint64_t bytes = to_make_.front();
        to_make_.pop_front();
        making_ = bytes;
        lk.unlock();
        std::unique_ptr<Slab> made;
        try {
            made = make_slab(bytes);
        } catch (const std::exception &e) {
            TH_LOG(Warn, "spill pool: cannot prepare a slab of ", mib(bytes), ": ", e.what());
        }
        lk.lock();
        making_ = 0;
        if (made) slabs_.push_back(std::move(made));
        else held_ -= bytes;
        cv_.notify_all();
    }
}

std::unique_ptr<SpillPool::Slab> SpillPool::make_slab(uint64_t bytes) {
    trace::event("slab_make", bytes);
    void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) fail(TH_ERR_NO_MEMORY, "cannot map ", mib(bytes), " for owned copies: ", std::strerror(errno));
    madvise(p, bytes, MADV_HUGEPAGE);  // a hint: fewer faults and TLB misses when it is available
    // Fault every page in now, off the trainer's path (MAP_POPULATE would
    // decide before the huge-page hint applies).
    for (uint64_t off = 0; off < bytes; off += 4096) static_cast<volatile uint8_t *>(p)[off] = 0;
    auto s = std::make_unique<Slab>();
    s->base = static_cast<uint8_t *>(p);
    s->bytes = bytes;
    try {
        s->region = ucx_.register_memory(p, bytes, TH_MEM_HOST);
    } catch (...) {
        munmap(p, bytes);
        throw;
    }
    trace::event("slab_made", bytes);
    TH_LOG(Debug, "spill pool: prepared a slab of ", mib(bytes));
    return s;
}

// The copy it held was released: the rkeys handed out for it must stop
// working (docs/security.md). Drop the old registration, then register the
// same, still faulted-in pages again, which gives them a new rkey.
void SpillPool::register_slab_anew(Slab &s) {
    trace::event("slab_renew", s.bytes);
    std::weak_ptr<MemRegion> was;
    {
        std::lock_guard lk(mu_);
        was = s.retiring;
        s.retiring.reset();
    }
    for (int i = 0; i < kRenewTries; ++i) {
        ucx_.forget_memory(s.base);
        if (was.expired()) break;
        std::this_thread::sleep_for(kRenewPause);  // an answer is still being sent from it
    }
    if (!was.expired()) TH_LOG(Warn, "spill pool: a slab's old registration is still in use; registering it anew anyway");
    RegionRef fresh;
    try {
        fresh = ucx_.register_memory(s.base, s.bytes, TH_MEM_HOST);
    } catch (const std::exception &e) {
        TH_LOG(Warn, "spill pool: registering a slab again failed, freeing it: ", e.what());
    }
    trace::event("slab_renewed", s.bytes, fresh != nullptr);
    std::lock_guard lk(mu_);
    if (fresh) {
        s.region = std::move(fresh);
        return;
    }
    auto it = std::find_if(slabs_.begin(), slabs_.end(), [&](auto &p) { return p.get() == &s; });
    held_ -= s.bytes;
    free_slab(s);
    slabs_.erase(it);
}

void SpillPool::free_slab(Slab &s) {
    void *base = s.base;
    s.region.reset();
    ucx_.forget_memory(base);
    munmap(base, s.bytes);
}

}  // namespace th
