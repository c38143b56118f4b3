// A point in time after which a blocking operation gives up, and the
// caller's flag that ends it sooner.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

namespace th {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

class Deadline {
  public:
    explicit Deadline(uint32_t ms) : at_(Clock::now() + std::chrono::milliseconds(ms)) {}
    explicit Deadline(Clock::time_point at) : at_(at) {}

    bool expired() const { return Clock::now() >= at_; }
    Clock::time_point at() const { return at_; }
    // Milliseconds left, at least 1 while not expired, 0 after.
    int32_t remaining_ms() const {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now()).count();
        if (left <= 0) return expired() ? 0 : 1;
        return static_cast<int32_t>(std::min<int64_t>(left, INT32_MAX));
    }
    // The earlier of this deadline and now + ms.
    Deadline capped(uint32_t ms) const { return Deadline(std::min(at_, Deadline(ms).at_)); }

  private:
    Clock::time_point at_;
};

// A caller's cancel token (th_cancel): signalled by another thread, looked
// at where the deadline is. Signalled too when its parent is (a token made
// for one operation among the several its parent ends); a child shares its
// parent, so either may go first.
struct CancelToken {
    std::atomic<bool> own{false};
    std::shared_ptr<const CancelToken> parent;

    bool signalled() const {
        for (const CancelToken *t = this; t != nullptr; t = t->parent.get())
            if (t->own.load(std::memory_order_acquire)) return true;
        return false;
    }
};
using CancelFlag = const CancelToken *;  // null for none
inline bool canceled(CancelFlag flag) { return flag != nullptr && flag->signalled(); }

inline uint64_t now_ms() {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count());
}

}  // namespace th
