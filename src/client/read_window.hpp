// How many chunk reads one source may have in flight.
//
// Enough to keep the path to the source busy, few enough that little waits in
// queues: whatever is in flight when a source changes its buffers, fails or
// stalls is read again, and on a thin link a fixed window of 8 chunks is a
// third of a second of it. The window follows the reads' latency, as LEDBAT
// does: latency above the lowest seen is time spent queued behind the
// source's other reads, and it is kept under a target.
#pragma once

#include <chrono>
#include <cstdint>

namespace th {

class ReadWindow {
  public:
    using Micros = std::chrono::microseconds;
    // Queueing above which the window shrinks (and below half of which it
    // grows), and the smallest window: with two reads in flight the next is
    // asked for while the other one's bytes still arrive.
    static constexpr Micros kTarget{20000};
    static constexpr uint32_t kMin = 2;
    // The target for a source whose queue costs more than it gives:
    // - one still filling (a relay of a chain) cannot be read faster than
    //   it fills, so what waits in its queue only delays the reader, and
    //   every reader after it, by as much (perf/cluster/NOTES.md, "A 2-vCPU
    //   VM of another kind");
    // - a publisher's own buffers change at its next begin-mutation (a
    //   trainer's optimizer step, often while its first readers still read
    //   them), and every read in flight then is lost and read again: a lone
    //   reader of a trainer lost 35 ms that way at 1 gbit
    //   (perf/cluster/NOTES.md, "A lone reader and the trainer's mutation").
    //   Not where its reads are guarded (the active-message path): its
    //   holder lets those it took up finish, and its spill answers the
    //   rest (client/control_word.hpp).
    // A reader's or a spilled copy, complete, keeps kTarget.
    static constexpr Micros kShortTarget{5000};
    static Micros target_for(bool complete, bool publisher, bool guarded) {
        return complete && (!publisher || guarded) ? kTarget : kShortTarget;
    }

    // Starts small: the first completion tells how long one chunk takes on
    // this path, and so how many fit in the target, of which it takes at
    // most twice as many as now (see on_complete).
    explicit ReadWindow(uint32_t max, Micros target = kTarget);

    uint32_t size() const { return size_; }
    // A read of this source completed after latency.
    void on_complete(Micros latency);

  private:
    uint32_t max_;
    Micros target_;
    uint32_t size_;
    Micros base_ = Micros::max();  // lowest latency seen
    Micros smoothed_{0};           // moving average of the latency
    uint32_t samples_ = 0;
    uint32_t since_change_ = 0;  // completions since the size changed
};

}  // namespace th
