#include "server/takeover_probe.hpp"

#include <algorithm>
#include <exception>

#include "common/thread_name.hpp"

namespace th {

TakeoverProbe::TakeoverProbe(Ping ping, std::function<uint64_t()> now_ms)
    : ping_(std::move(ping)), now_ms_(std::move(now_ms)), thread_([this] {
          name_this_thread("th-takeover");
          run();
      }) {}

TakeoverProbe::~TakeoverProbe() {
    {
        std::lock_guard lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

TakeoverProbe::Answer TakeoverProbe::ask(const std::string &url, uint32_t probe_ms) {
    std::lock_guard lk(mu_);
    uint64_t now = now_ms_();
    if (entries_.size() >= kPruneAt)  // answers no longer standing about other URLs
        std::erase_if(entries_, [&](const auto &kv) {
            return !kv.second.running && kv.first != url && now > kv.second.ended_ms + kKeepMs;
        });
    Entry &e = entries_[url];
    if (e.running) return {};
    if (e.ended_ms != 0 && now <= e.ended_ms + kKeepMs) return e.answer;
    e.running = true;
    e.probe_ms = std::clamp<uint32_t>(probe_ms, 1, kMaxProbeMs);
    queue_.push_back(url);
    cv_.notify_one();
    return {};
}

void TakeoverProbe::run() {
    std::unique_lock lk(mu_);
    for (;;) {
        cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        std::string url = std::move(queue_.front());
        queue_.pop_front();
        uint32_t ms = entries_[url].probe_ms;
        lk.unlock();
        Answer answer;
        try {
            answer.epoch = ping_(url, ms);
            answer.state = Answer::State::Answers;
        } catch (const std::exception &e) {
            answer.state = Answer::State::Gone;
            answer.why = e.what();
        }
        lk.lock();
        Entry &e = entries_[url];
        e.running = false;
        e.ended_ms = std::max<uint64_t>(now_ms_(), 1);
        e.answer = std::move(answer);
    }
}

}  // namespace th
