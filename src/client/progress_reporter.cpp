#include "client/progress_reporter.hpp"

#include "common/log.hpp"
#include "common/thread_name.hpp"

namespace th {

ProgressReporter::ProgressReporter(ServerSession &session, uint64_t replica_id, const ControlWord *word, uint32_t period_ms)
    : session_(session), replica_id_(replica_id), word_(word), period_ms_(period_ms) {
    thread_ = std::thread([this] {
        name_this_thread("th-fill-report");
        loop();
    });
}

ProgressReporter::~ProgressReporter() {
    {
        std::lock_guard lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

void ProgressReporter::loop() {
    uint64_t sent = 0;
    std::unique_lock lk(mu_);
    while (!cv_.wait_for(lk, std::chrono::milliseconds(period_ms_), [this] { return stop_; })) {
        uint64_t done = word_->chunks_done.load(std::memory_order_acquire);
        if (done == sent) continue;
        lk.unlock();
        try {
            // A short deadline: a late report is worth nothing, the next one
            // carries a newer count anyway.
            session_.call(
                [&](wire::Builder &b, const wire::Header &h) {
                    return wire::finish(b, h, wire::CreateProgress(b, replica_id_, static_cast<uint32_t>(done)));
                },
                Deadline(std::min<uint32_t>(session_.config().timeout_ms, 1000)));
            sent = done;
        } catch (const std::exception &e) {
            TH_LOG(Debug, "progress report for replica ", replica_id_, " failed: ", e.what());
        }
        lk.lock();
    }
}

}  // namespace th
