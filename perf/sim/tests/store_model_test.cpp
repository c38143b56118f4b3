// The simulator's store baseline is push then pull, as the emulated
// cluster's Redis baseline: readers start once the whole push is in.
#include <gtest/gtest.h>

#include "sim/cluster.hpp"

namespace sim = th::sim;

namespace {

sim::Setup one_reader(bool pipelined) {
    sim::Setup s;
    s.readers = 1;
    s.size_bytes = 64ull << 20;
    s.chunk_bytes = 512 << 10;
    s.store_pipelined = pipelined;
    return s;
}

}  // namespace

TEST(StoreModel, ReadersPullOnlyAfterTheWholePush) {
    sim::Setup s = one_reader(false);
    double floor_s = double(s.size_bytes) / s.host_bps;
    sim::Result r = sim::simulate(s, sim::Method::Store);
    // Push S to the store, then pull S from it.
    EXPECT_GE(r.makespan_s, 2 * floor_s);
    EXPECT_LE(r.makespan_s, 2.05 * floor_s);
}

TEST(StoreModel, APipelinedStoreOverlapsPushAndPull) {
    sim::Setup s = one_reader(true);
    double floor_s = double(s.size_bytes) / s.host_bps;
    sim::Result r = sim::simulate(s, sim::Method::Store);
    EXPECT_GE(r.makespan_s, floor_s);
    EXPECT_LE(r.makespan_s, 1.1 * floor_s);
}
