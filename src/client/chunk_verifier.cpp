#include "client/chunk_verifier.hpp"

#include "common/error.hpp"
#include "common/thread_name.hpp"
#include "common/trace.hpp"

namespace th {

ChunkVerifier::~ChunkVerifier() {
    {
        std::lock_guard lk(mu_);
        stop_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
}

void ChunkVerifier::submit(Batch b) {
    trace::event("verify_ask", b.chunks.empty() ? 0 : b.chunks.front(), b.chunks.size());
    {
        std::lock_guard lk(mu_);
        todo_.push_back(std::move(b));
        if (!thread_.joinable()) thread_ = std::thread([this] {
            name_this_thread("th-verify");
            loop();
        });
    }
    pending_++;
    cv_.notify_one();
}

std::vector<ChunkVerifier::Batch> ChunkVerifier::take_done() {
    std::vector<Batch> out;
    {
        std::lock_guard lk(mu_);
        out.swap(done_);
    }
    pending_ -= out.size();
    return out;
}

// Takes every batch queued while the last was hashed and hashes them
// together: device chunks then cost one kernel launch and one wait however
// many batches came in meanwhile, so batches grow with the hashing's own
// latency instead of each control-word answer's few chunks paying for one.
void ChunkVerifier::loop() {
    std::unique_lock lk(mu_);
    for (;;) {
        cv_.wait(lk, [&] { return stop_ || !todo_.empty(); });
        if (stop_) return;
        std::vector<Batch> taken;
        taken.swap(todo_);
        lk.unlock();
        std::vector<std::vector<ChunkPiece>> pieces;
        for (Batch &b : taken)
            for (auto &p : b.pieces) pieces.push_back(std::move(p));
        trace::event("verify_start", taken.size(), pieces.size());
        std::vector<uint64_t> sums;
        th_status code = TH_OK;
        std::string error;
        try {
            sums = checksums(pieces);
        } catch (const Error &e) {
            code = e.code();
            error = e.what();
        } catch (const std::exception &e) {
            code = TH_ERR_INTERNAL;
            error = e.what();
        }
        trace::event("verify_done", taken.size(), pieces.size());
        size_t at = 0;
        for (Batch &b : taken) {
            b.pieces.clear();
            b.code = code;
            b.error = error;
            if (code == TH_OK) b.sums.assign(sums.begin() + at, sums.begin() + at + b.chunks.size());
            at += b.chunks.size();
        }
        lk.lock();
        for (Batch &b : taken) done_.push_back(std::move(b));
        box_->post(ReadEvent{ReadEvent::Verified, nullptr, 0, nullptr});
    }
}

uint32_t ChunkSums::landed(size_t i, bool hash) {
    Entry &e = e_.at(i);
    e.landing++;
    e.asked = hash;
    e.back = false;
    return e.landing;
}

bool ChunkSums::hashed(size_t i, uint32_t landing, uint64_t sum) {
    Entry &e = e_.at(i);
    if (!e.asked || landing != e.landing) return false;
    e.back = true;
    e.sum = sum;
    return true;
}

std::optional<uint64_t> ChunkSums::sum(size_t i) const {
    const Entry &e = e_.at(i);
    if (!e.asked || !e.back) return std::nullopt;
    return e.sum;
}

}  // namespace th
