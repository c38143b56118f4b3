#include "client/read_window.hpp"

#include <algorithm>

namespace th {

ReadWindow::ReadWindow(uint32_t max, Micros target)
    : max_(std::max(max, 1u)), target_(std::max(target, Micros(1))), size_(std::min(kMin, max_)) {}

void ReadWindow::on_complete(Micros latency) {
    latency = std::max(latency, Micros(1));
    base_ = std::min(base_, latency);
    // An average over the last few reads: a single late completion (a
    // descheduled thread) counts for a quarter.
    smoothed_ = samples_++ == 0 ? latency : (smoothed_ * 3 + latency) / 4;
    uint32_t was = size_;
    if (samples_ == 1) {
        // The first read had none ahead of it: its latency is about what one
        // chunk takes on this path, so this many fit in the target. At most
        // twice as many as now, though: a link's first chunk often passes
        // in its burst allowance (0.7 ms for 512 KiB at 1 gbit, where the
        // rest take 4.4), and a window opened on it would keep eight reads
        // in flight until eight had completed.
        size_ = static_cast<uint32_t>(std::clamp<int64_t>(1 + target_ / latency, std::min(kMin, max_), std::min(max_, 2 * size_)));
    } else if (++since_change_ >= size_) {
        // One step per window's worth of completions: the latency of reads
        // asked for under the old size has to pass first.
        Micros queued = smoothed_ - base_;
        // Each read waits behind the other size - 1: the size whose wait
        // would be the target.
        int64_t fit = 1 + target_.count() * (size_ - 1) / std::max<int64_t>(queued.count(), 1);
        if (queued > target_) {
            // Shrink at once to it, by one at least.
            uint32_t least = std::min(kMin, max_);
            size_ = static_cast<uint32_t>(std::clamp<int64_t>(fit, least, std::max(size_ - 1, least)));
        } else if (queued < target_ / 2) {
            size_ = std::min(max_, size_ * 2);  // room to spare: double, as TCP's slow start does
        } else if (fit > size_) {
            size_ = std::min(max_, size_ + 1);  // one more still fits in the target
        }
    }
    if (size_ != was) since_change_ = 0;
}

}  // namespace th
