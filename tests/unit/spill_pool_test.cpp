// The memory owned copies are spilled into: made ready ahead, reused, renewed
// (new rkeys) when given back, bounded by its cap.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "client/spill_pool.hpp"
#include "common/error.hpp"

using namespace th;

namespace {

constexpr uint64_t kMiB = 1 << 20;

// Waits (bounded) until the pool's thread has made or renewed what it was asked.
void settle(SpillPool &pool, size_t slabs) {
    for (int i = 0; i < 1000 && pool.usage().slabs < slabs; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

}  // namespace

TEST(SpillPool, PrepareMakesASlabAheadThatAcquireTakes) {
    UcxWorker ucx;
    SpillPool pool(ucx, 0);
    pool.prepare(3 * kMiB);
    settle(pool, 1);
    SpillPool::Usage u = pool.usage();
    ASSERT_EQ(u.slabs, 1u);
    EXPECT_EQ(u.held, 4 * kMiB) << "slabs are whole 2 MiB pages";
    EXPECT_EQ(u.lent, 0u);
    SpillPool::Lease lease = pool.acquire(3 * kMiB);
    ASSERT_TRUE(lease);
    lease.data()[3 * kMiB - 1] = 7;  // writable to its end
    EXPECT_EQ(pool.usage().slabs, 1u) << "acquire took the prepared slab instead of making one";
    EXPECT_EQ(pool.usage().lent, 4 * kMiB);
    pool.prepare(3 * kMiB);  // the only one is lent: a spare is made
    settle(pool, 2);
    EXPECT_EQ(pool.usage().slabs, 2u);
}

TEST(SpillPool, AGivenBackSlabIsReusedUnderANewRegistration) {
    UcxWorker ucx;
    SpillPool pool(ucx, 0);
    SpillPool::Lease first = pool.acquire(kMiB);
    uint8_t *memory = first.data();
    RegionRef old = ucx.register_memory(memory, kMiB, TH_MEM_HOST, /*expose=*/true);
    std::vector<uint8_t> old_rkey = old->rkey;
    std::weak_ptr<MemRegion> was = old;
    old.reset();
    first.reset();
    SpillPool::Lease again = pool.acquire(kMiB);  // waits for the renewal
    EXPECT_EQ(again.data(), memory) << "the same pages, already faulted in";
    EXPECT_EQ(pool.usage().slabs, 1u);
    EXPECT_TRUE(was.expired()) << "the registration handed out with the first copy is gone";
    RegionRef now = ucx.register_memory(again.data(), kMiB, TH_MEM_HOST);
    EXPECT_NE(now.get(), nullptr);
}

TEST(SpillPool, ACopyOverTheCapIsAClearError) {
    UcxWorker ucx;
    SpillPool pool(ucx, 6 * kMiB);
    SpillPool::Lease a = pool.acquire(4 * kMiB);
    try {
        SpillPool::Lease b = pool.acquire(4 * kMiB);
        FAIL() << "a second 4 MiB copy fit under a 6 MiB cap";
    } catch (const Error &e) {
        EXPECT_EQ(e.code(), TH_ERR_NO_MEMORY);
        EXPECT_NE(std::string(e.what()).find("cap of 6 MiB"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("4 MiB are held by owned copies"), std::string::npos) << e.what();
    }
    pool.prepare(4 * kMiB);  // no room: nothing is made, nothing fails
    EXPECT_EQ(pool.usage().held, 4 * kMiB);
}

TEST(SpillPool, IdleSlabsTooSmallMakeRoomUnderTheCap) {
    UcxWorker ucx;
    SpillPool pool(ucx, 6 * kMiB);
    {
        SpillPool::Lease small = pool.acquire(2 * kMiB);
    }
    SpillPool::Lease large = pool.acquire(6 * kMiB);  // the idle 2 MiB slab goes
    ASSERT_TRUE(large);
    SpillPool::Usage u = pool.usage();
    EXPECT_EQ(u.slabs, 1u);
    EXPECT_EQ(u.held, 6 * kMiB);
}
