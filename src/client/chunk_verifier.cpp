#include "client/chunk_verifier.hpp"

#include "common/error.hpp"
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
        if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
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

void ChunkVerifier::loop() {
    std::unique_lock lk(mu_);
    for (;;) {
        cv_.wait(lk, [&] { return stop_ || !todo_.empty(); });
        if (stop_) return;
        Batch b = std::move(todo_.front());
        todo_.pop_front();
        lk.unlock();
        try {
            b.sums = checksums(b.pieces);
        } catch (const Error &e) {
            b.code = e.code();
            b.error = e.what();
        } catch (const std::exception &e) {
            b.code = TH_ERR_INTERNAL;
            b.error = e.what();
        }
        trace::event("verify_done", b.chunks.empty() ? 0 : b.chunks.front(), b.chunks.size());
        lk.lock();
        done_.push_back(std::move(b));
        box_->post(ReadEvent{ReadEvent::Verified, nullptr, 0, nullptr});
    }
}

}  // namespace th
