#include "client/read_window.hpp"
#include "client/fetch_source.hpp"

#include <gtest/gtest.h>

using th::ReadWindow;
using Micros = std::chrono::microseconds;

namespace {

// A source behind a link that delivers one chunk per `chunk_time`: of the
// GETs asked for at once at the start, the k-th completes after k chunk
// times; after that each GET waits behind the size - 1 others in flight.
void drive(ReadWindow &w, Micros chunk_time, int completions) {
    uint32_t first = w.size();
    for (uint32_t k = 1; k <= first; ++k) w.on_complete(k * chunk_time);
    for (int i = 0; i < completions; ++i) w.on_complete(w.size() * chunk_time);
}

}  // namespace

TEST(ReadWindow, StartsSmallAndDoublesToTheWholeWindowOnAFastPath) {
    ReadWindow w(8);
    EXPECT_EQ(w.size(), ReadWindow::kMin);
    w.on_complete(Micros(300));  // one chunk in 0.3 ms: 67 would fit in the target
    EXPECT_EQ(w.size(), 2 * ReadWindow::kMin);
    for (int i = 0; i < 4; ++i) w.on_complete(Micros(300));
    EXPECT_EQ(w.size(), 8u);
    for (int i = 0; i < 100; ++i) w.on_complete(Micros(300));
    EXPECT_EQ(w.size(), 8u);
}

TEST(ReadWindow, AThinLinkKeepsTwoInFlight) {
    ReadWindow w(8);
    w.on_complete(Micros(44000));  // 512 KiB chunks at 0.1 gbit
    EXPECT_EQ(w.size(), ReadWindow::kMin);  // from the first completion on
    drive(w, Micros(44000), 40);
    EXPECT_EQ(w.size(), ReadWindow::kMin);
}

TEST(ReadWindow, ShrinksWhenItsGetsQueue) {
    ReadWindow w(8);
    for (int i = 0; i < 5; ++i) w.on_complete(Micros(500));  // fast at first
    ASSERT_EQ(w.size(), 8u);
    // Then the path slows to 4.4 ms per chunk and each GET waits for the
    // others in flight.
    for (int i = 0; i < 40; ++i) w.on_complete(Micros(500) + (w.size() - 1) * Micros(4400));
    EXPECT_EQ(w.size(), 5u);
}

TEST(ReadWindow, KeepsTheQueueNearTheTarget) {
    ReadWindow w(8);
    drive(w, Micros(4400), 200);  // 512 KiB chunks at 1 gbit
    // (size - 1) x 4.4 ms queued: 5 is the largest size within the target of
    // 20 ms, and 3 would be below half of it.
    EXPECT_EQ(w.size(), 5u);
}

// A relay still filling is read with a queue of at most 5 ms: with 512 KiB
// chunks at 1 gbit that is two reads in flight, where a complete source on
// the same path gets five.
TEST(ReadWindow, ASourceStillFillingQueuesLess) {
    ReadWindow filling(8, ReadWindow::kShortTarget);
    EXPECT_EQ(filling.size(), ReadWindow::kMin);
    drive(filling, Micros(4400), 200);
    EXPECT_EQ(filling.size(), 2u);
    // 256 KiB chunks: (size - 1) x 2.2 ms within 5 ms.
    ReadWindow smaller(8, ReadWindow::kShortTarget);
    drive(smaller, Micros(2200), 200);
    EXPECT_EQ(smaller.size(), 3u);
    // A fast path still opens fully.
    ReadWindow fast(8, ReadWindow::kShortTarget);
    drive(fast, Micros(300), 200);
    EXPECT_EQ(fast.size(), 8u);
}

// A publisher's own buffers change at its next begin-mutation, so they are
// read with the short target, as a relay still filling is; a complete
// replica that no user writes (a reader's, a spilled copy) keeps 20 ms, and
// so does a publisher whose reads are guarded (none is lost at its change).
TEST(ReadWindow, APublishersBuffersAndAFillingSourceGetTheShortTarget) {
    EXPECT_EQ(ReadWindow::target_for(/*complete=*/true, /*publisher=*/false, /*guarded=*/false), ReadWindow::kTarget);
    EXPECT_EQ(ReadWindow::target_for(true, true, false), ReadWindow::kShortTarget);
    EXPECT_EQ(ReadWindow::target_for(true, true, true), ReadWindow::kTarget);
    EXPECT_EQ(ReadWindow::target_for(false, false, false), ReadWindow::kShortTarget);
    EXPECT_EQ(ReadWindow::target_for(false, false, true), ReadWindow::kShortTarget);
    EXPECT_LT(ReadWindow::kShortTarget, ReadWindow::kTarget);
}

// A link's first chunk may pass in its burst allowance (0.7 ms for 512 KiB
// at 1 gbit, where the next take 4.4 ms each): the window opens at most
// twofold on it, and comes down to two at the first check of the queue,
// rather than keeping eight reads in flight until eight have completed.
TEST(ReadWindow, AFirstChunkInABurstDoesNotOpenTheWindowFully) {
    ReadWindow w(8, ReadWindow::kShortTarget);
    w.on_complete(Micros(700));
    EXPECT_EQ(w.size(), 2 * ReadWindow::kMin);
    for (uint32_t k = 1; k <= 4; ++k) w.on_complete(Micros(700) + k * Micros(4400));
    EXPECT_EQ(w.size(), ReadWindow::kMin);
}

TEST(ReadWindow, AFastPathKeepsTheWholeWindow) {
    ReadWindow w(8);
    drive(w, Micros(2500), 200);  // 4 MiB chunks at 1.6 GB/s
    EXPECT_EQ(w.size(), 8u);
}

TEST(ReadWindow, GrowsBackWhenTheQueueDrains) {
    ReadWindow w(8);
    drive(w, Micros(44000), 40);
    ASSERT_EQ(w.size(), ReadWindow::kMin);
    for (int i = 0; i < 100; ++i) w.on_complete(Micros(44000));  // nothing queued any more
    EXPECT_EQ(w.size(), 8u);
}

TEST(ReadWindow, NeverBelowOneOrAboveItsMaximum) {
    ReadWindow one(1);
    drive(one, Micros(50000), 20);
    EXPECT_EQ(one.size(), 1u);
    ReadWindow zero(0);  // treated as one
    EXPECT_EQ(zero.size(), 1u);
    ReadWindow instant(8);  // completions measured as taking no time at all
    for (int i = 0; i < 5; ++i) instant.on_complete(Micros(0));
    EXPECT_EQ(instant.size(), 8u);
}

// Chunks that move in microseconds are read several at a time (up to 64 MiB
// a read); a chunk that takes longer than the target is read alone.
TEST(ChunksPerRead, FollowTheQuickestChunkUpToTheCap) {
    using th::chunks_per_read;
    EXPECT_EQ(chunks_per_read(Micros(50), 4 << 20), 10u);
    EXPECT_EQ(chunks_per_read(Micros(14), 4 << 20), 16u);      // cuda_ipc on an H200: the cap
    EXPECT_EQ(chunks_per_read(Micros(1), 4 << 20), 16u);       // 64 MiB
    EXPECT_EQ(chunks_per_read(Micros(0), 4 << 20), 16u);       // a clock that saw nothing
    EXPECT_EQ(chunks_per_read(Micros(1), 64ull << 20), 1u);    // one chunk is the cap
    EXPECT_EQ(chunks_per_read(Micros(1), 256ull << 20), 1u);
    EXPECT_EQ(chunks_per_read(Micros(420), 4 << 20), 1u);      // cma at 10 GB/s
    EXPECT_EQ(chunks_per_read(Micros(4000), 512 << 10), 1u);  // 512 KiB at 1 gbit
    EXPECT_EQ(chunks_per_read(Micros::max(), 4 << 20), 1u);   // no read seen yet, or not one-sided
}
