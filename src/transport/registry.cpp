#include "transport/registry.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include "common/deadline.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "transport/memory_kind.hpp"

namespace th {

namespace {

// Unexposed registrations with no user left are kept (the next fetch often
// reads into the same buffers) up to this many.
constexpr size_t kMaxIdleRegions = 64;

bool same_bytes(const std::vector<uint8_t> &a, const uint8_t *b, size_t n) {
    if (a.size() != n) return false;
    uint8_t diff = 0;  // constant time: the rkey is what authorises the read
    for (size_t i = 0; i < n; i++) diff |= a[i] ^ b[i];
    return diff == 0;
}

}  // namespace

MemRegion::~MemRegion() {
    if (memh != nullptr) ucp_mem_unmap(context, memh);
}

RegionRef Registry::register_memory(void *ptr, uint64_t n, th_mem_kind kind, bool expose) {
    if (ptr == nullptr || n == 0) fail(TH_ERR_INVALID_ARG, "cannot register a null or empty buffer");
    auto p = reinterpret_cast<uintptr_t>(ptr);
    std::lock_guard mlk(map_mu_);
    {
        std::lock_guard lk(mu_);
        for (Entry &e : entries_)
            if (e.region->kind == kind && e.region->contains(p, n)) {
                e.exposed = e.exposed || expose;
                return e.region;
            }
    }
    check_memory_kind(ptr, kind);
    auto r = std::make_shared<MemRegion>();
    r->base = p;
    r->length = n;
    r->kind = kind;
    r->context = context_;
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
    mp.address = ptr;
    mp.length = n;
    mp.memory_type = kind == TH_MEM_CUDA ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
    ucs_status_t st = ucp_mem_map(context_, &mp, &r->memh);
    if (st != UCS_OK)
        fail(TH_ERR_TRANSPORT, "cannot register ", n, " bytes of ", kind == TH_MEM_CUDA ? "CUDA" : "host",
             " memory with UCX: ", ucs_status_string(st), kind == TH_MEM_CUDA ? " (is UCX built with CUDA support?)" : "");
    void *buf = nullptr;
    size_t len = 0;
    st = ucp_rkey_pack(context_, r->memh, &buf, &len);
    if (st != UCS_OK) fail(TH_ERR_TRANSPORT, "cannot pack the remote key of a registration: ", ucs_status_string(st));
    r->rkey.assign(static_cast<uint8_t *>(buf), static_cast<uint8_t *>(buf) + len);
    ucp_rkey_buffer_release(buf);
    std::vector<RegionRef> evicted;  // unmapped after mu_ is released
    std::lock_guard lk(mu_);
    auto idle = [](const Entry &e) { return !e.exposed && e.region.use_count() == 1; };
    size_t n_idle = std::count_if(entries_.begin(), entries_.end(), idle);
    for (auto it = entries_.begin(); n_idle >= kMaxIdleRegions && it != entries_.end();) {
        if (idle(*it)) {
            evicted.push_back(std::move(it->region));
            it = entries_.erase(it);
            --n_idle;
        } else {
            ++it;
        }
    }
    entries_.push_back({r, expose});
    return r;
}

namespace {

bool being_answered(const RegionRef &r) { return r->answering.load() > 0; }

}  // namespace

bool Registry::answers_finished(const std::vector<RegionRef> &regions, uint32_t wait_ms) {
    Deadline until(wait_ms);
    while (std::any_of(regions.begin(), regions.end(), being_answered) && !until.expired())
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    bool all = true;
    for (const RegionRef &r : regions)
        if (being_answered(r)) {
            r->answers_stuck = true;
            all = false;
        }
    return all;
}

bool Registry::let_answers_finish(std::vector<RegionRef> regions, uint32_t wait_ms, const char *what) {
    // Answers already waited for in vain are not waited for twice: a replica
    // whose reader stopped taking them would hold its release up once more.
    std::vector<RegionRef> awaited;
    for (const RegionRef &r : regions)
        if (!r->answers_stuck) awaited.push_back(r);
    bool awaited_finished = answers_finished(awaited, wait_ms);
    std::vector<RegionRef> finished;  // unmapped as this returns, after mu_ is released
    bool all = true;
    {
        std::lock_guard lk(mu_);
        for (RegionRef &r : lingering_)  // earlier ones whose answers are done now
            if (!being_answered(r)) finished.push_back(std::move(r));
        std::erase(lingering_, nullptr);
        for (RegionRef &r : regions) {
            all = all && !being_answered(r);
            (being_answered(r) ? lingering_ : finished).push_back(std::move(r));
        }
    }
    if (!awaited_finished)  // the others were warned of when they were waited for
        TH_LOG(Warn, "answers from ", what, " were still being sent after ", wait_ms,
               " ms (a reader that stopped taking them?): its memory is given up all the same");
    return all;
}

template <class Pred>
std::vector<RegionRef> Registry::take_if(Pred pred) {
    std::vector<RegionRef> taken;
    std::lock_guard lk(mu_);
    for (auto it = entries_.begin(); it != entries_.end();) {
        if (pred(*it)) {
            taken.push_back(std::move(it->region));
            it = entries_.erase(it);
        } else {
            ++it;
        }
    }
    return taken;
}

size_t Registry::withdraw_unused(uint32_t wait_ms) {
    std::vector<RegionRef> withdrawn = take_if([](const Entry &e) { return e.exposed && e.region.use_count() == 1; });
    size_t n = withdrawn.size();
    if (n > 0) let_answers_finish(std::move(withdrawn), wait_ms, "a released replica's memory");
    return n;
}

void Registry::forget(const void *base) {
    auto p = reinterpret_cast<uintptr_t>(base);
    std::vector<RegionRef> forgotten =
        take_if([p](const Entry &e) { return e.region->base == p && e.region.use_count() == 1; });
    if (!forgotten.empty()) let_answers_finish(std::move(forgotten), kAnswersFinishMs, "memory about to be freed");
}

MemRegion *Registry::served(uint64_t p, uint64_t n, const uint8_t *rkey, size_t rkey_len) const {
    std::lock_guard lk(mu_);
    for (const Entry &e : entries_)
        if (e.exposed && e.region->contains(p, n) && same_bytes(e.region->rkey, rkey, rkey_len)) {
            e.region->answering++;  // under mu_: whoever withdraws it next sees the answer
            return e.region.get();
        }
    return nullptr;
}

bool Registry::read_word(uint64_t p, uint32_t bytes, uint64_t *out) const {
    if ((bytes != 4 && bytes != 8) || p % bytes != 0) return false;
    std::lock_guard lk(mu_);
    for (const Entry &e : entries_)
        if (e.exposed && e.region->kind == TH_MEM_HOST && e.region->contains(p, bytes)) {
            *out = bytes == 8 ? __atomic_load_n(reinterpret_cast<const uint64_t *>(p), __ATOMIC_SEQ_CST)
                              : __atomic_load_n(reinterpret_cast<const uint32_t *>(p), __ATOMIC_SEQ_CST);
            return true;
        }
    return false;
}

bool Registry::withdraw(const MemRegion *region, uint32_t wait_ms) {
    std::vector<RegionRef> gone = take_if([region](const Entry &e) { return e.region.get() == region; });
    return gone.empty() || let_answers_finish(std::move(gone), wait_ms, "a withdrawn region");
}

size_t Registry::size() const {
    std::lock_guard lk(mu_);
    return entries_.size();
}

void Registry::abandon_answers() {
    std::lock_guard lk(mu_);
    for (Entry &e : entries_) e.region->answering = 0;
    for (RegionRef &r : lingering_) r->answering = 0;
}

void Registry::clear() {
    std::vector<Entry> all;
    std::vector<RegionRef> lingering;
    std::lock_guard lk(mu_);
    all.swap(entries_);
    lingering.swap(lingering_);
}

}  // namespace th
