#include "client/control_word.hpp"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#include "common/error.hpp"

namespace th {

namespace {

// Pages of control words are never handed back to the allocator. A reader on
// a one-sided lane (cma) reads a word by its address, with no help from the
// holder: after the holder's client is gone, in a process that lives on,
// freed memory could hold anything, the generation the reader knows
// included, and the reader would keep bytes its holder may already be
// overwriting. A later client of the process takes the page over instead:
// its slots' generations keep growing, so such a reader sees its word changed.
struct PagePool {
    std::mutex mu;
    std::vector<std::pair<ControlWord *, size_t>> pages;  // words, slots

    static PagePool &get() {
        static auto *pool = new PagePool;  // never destroyed: clients may outlive statics
        return *pool;
    }
};

ControlWord *take_page(size_t slots) {
    PagePool &pool = PagePool::get();
    {
        std::lock_guard lk(pool.mu);
        for (auto it = pool.pages.begin(); it != pool.pages.end(); ++it) {
            if (it->second != slots) continue;
            ControlWord *words = it->first;
            pool.pages.erase(it);
            return words;
        }
    }
    size_t bytes = (slots * sizeof(ControlWord) + 4095) / 4096 * 4096;  // aligned_alloc takes whole pages
    auto *words = static_cast<ControlWord *>(std::aligned_alloc(4096, bytes));
    if (words == nullptr) throw std::bad_alloc();
    for (size_t i = 0; i < slots; ++i) new (&words[i]) ControlWord{};  // every field 0
    return words;
}

void give_page(ControlWord *words, size_t slots) {
    PagePool &pool = PagePool::get();
    std::lock_guard lk(pool.mu);
    pool.pages.emplace_back(words, slots);
}

}  // namespace

ControlPage::ControlPage(UcxWorker &ucx, size_t slots) : ucx_(ucx), words_(take_page(slots)), slots_(slots) {
    for (size_t i = 0; i < slots; ++i) free_.push_back(static_cast<uint32_t>(slots - 1 - i));
    try {
        region_ = ucx.register_memory(words_, slots * sizeof(ControlWord), TH_MEM_HOST, /*expose=*/true);
    } catch (...) {
        give_page(words_, slots_);
        throw;
    }
}

// The page outlives no answer sent from it: its registration is withdrawn
// first, so that no read request and no waiting read (which reads the words
// on the progress thread) finds it, and answers already being sent from it
// are let finish. The client's UCX worker still runs: readers of its replicas
// may still be asking. Every word left unreleased ends its generation (a
// replica detached with its client); then the page waits for the next client.
ControlPage::~ControlPage() {
    bool finished = ucx_.withdraw(region_);
    region_.reset();
    for (size_t i = 0; i < slots_; ++i)
        if (words_[i].generation.load() % 2 == 0) words_[i].generation.fetch_add(1);
    if (finished) give_page(words_, slots_);  // else left to UCX, not handed on under an answer it still sends
}

void ControlWord::mark_unsettled(uint64_t g) {
    uint64_t now = unsettled.load();
    while (now < g && !unsettled.compare_exchange_weak(now, g)) {
    }
}

ControlPage::Slot ControlPage::acquire() {
    std::lock_guard lk(mu_);
    if (free_.empty()) fail(TH_ERR_NO_MEMORY, "too many replicas held by one client (", slots_, ")");
    uint32_t i = free_.back();
    free_.pop_back();
    ControlWord *w = &words_[i];
    uint64_t g = w->generation.load();
    w->generation.store((g + 2) & ~uint64_t(1));
    w->chunks_done.store(0);
    w->stripes.store(0);
    for (auto &d : w->stripe_done) d.store(0);
    // unsettled stays: it names generations of earlier tenants.
    return {w, uint64_t(i) * sizeof(ControlWord)};
}

void ControlPage::release(ControlWord *word) {
    // Odd: any reader still reading this replica sees the change and re-reads.
    word->generation.fetch_add(1);
    std::lock_guard lk(mu_);
    free_.push_back(static_cast<uint32_t>(word - words_));
}

}  // namespace th

namespace th {

FillLevel FillLevel::decode(const uint8_t *block, uint32_t bytes, uint32_t num_chunks) {
    FillLevel f;
    uint64_t leading = 0;
    std::memcpy(&leading, block + kLeadingAt, 8);
    f.leading = static_cast<uint32_t>(std::min<uint64_t>(leading, num_chunks));
    if (bytes < kControlBlockBytes) return f;
    uint32_t k = 0;
    std::memcpy(&k, block + kStripesAt, 4);
    if (k < 2 || k > kMaxStripes || k > num_chunks) return f;
    f.stripes = k;
    std::memcpy(f.done, block + kStripeDoneAt, sizeof f.done);
    for (uint32_t i = 0; i < k; ++i)
        f.done[i] = std::min(f.done[i], stripe_begin(num_chunks, k, i + 1) - stripe_begin(num_chunks, k, i));
    return f;
}

uint32_t FillLevel::held_until(uint32_t from, uint32_t end, uint32_t num_chunks) const {
    if (stripes == 0) return std::max(from, std::min(end, leading));
    // A chunk is held when it is inside the leading run or inside its
    // stripe's filled start; walk from `from` while that holds.
    uint32_t c = from;
    while (c < end) {
        if (c < leading) {
            c = std::min(end, leading);
            continue;
        }
        uint32_t i = stripe_of(num_chunks, stripes, c);
        uint32_t held = stripe_begin(num_chunks, stripes, i) + done[i];
        if (c >= held) break;
        c = std::min(end, held);
    }
    return c;
}

}  // namespace th
