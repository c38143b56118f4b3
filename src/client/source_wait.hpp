// How long a fetch keeps fetching again while no live holder may serve its
// reader (wire::NoSourceYet: it failed to read from each, or they are still
// filling). A wait starts at the first such answer and ends after the
// patience; an attempt that was given a source in between starts it afresh,
// since the reader was not idle: it tried that source, which took its own
// timeouts to fail (a stalled lane, a path that silently drops packets), and
// while it did, the holders it waits for may have moved on to a newer
// version or become eligible. The fetch's own deadline still bounds it all.
#pragma once

#include <chrono>

#include "common/deadline.hpp"

namespace th {

class SourceWait {
  public:
    explicit SourceWait(std::chrono::milliseconds patience) : patience_(patience) {}

    // An attempt ended with no holder that may serve the reader; it had a
    // source before that when had_source. True when this starts a wait.
    bool begin(bool had_source, Clock::time_point now) {
        if (waiting_ && !had_source) return false;
        waiting_ = true;
        since_ = now;
        return true;
    }

    bool spent(Clock::time_point now) const { return waiting_ && now - since_ >= patience_; }

    std::chrono::milliseconds patience() const { return patience_; }

  private:
    std::chrono::milliseconds patience_;
    bool waiting_ = false;
    Clock::time_point since_{};
};

}  // namespace th
