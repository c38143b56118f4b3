#include "client/control_word.hpp"

#include <cstdlib>
#include <new>

#include "common/error.hpp"

namespace th {

ControlPage::ControlPage(UcxWorker &ucx, size_t slots) : slots_(slots) {
    words_ = static_cast<ControlWord *>(std::aligned_alloc(4096, slots * sizeof(ControlWord)));
    if (words_ == nullptr) throw std::bad_alloc();
    for (size_t i = 0; i < slots; ++i) {
        new (&words_[i]) ControlWord{};
        words_[i].generation.store(0);
        words_[i].chunks_done.store(0);
        free_.push_back(static_cast<uint32_t>(slots - 1 - i));
    }
    region_ = ucx.register_memory(words_, slots * sizeof(ControlWord), TH_MEM_HOST, /*expose=*/true);
}

ControlPage::~ControlPage() {
    region_.reset();
    std::free(words_);
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
    return {w, uint64_t(i) * sizeof(ControlWord)};
}

void ControlPage::release(ControlWord *word) {
    // Odd: any reader still reading this replica sees the change and re-reads.
    word->generation.fetch_add(1);
    std::lock_guard lk(mu_);
    free_.push_back(static_cast<uint32_t>(word - words_));
}

}  // namespace th
