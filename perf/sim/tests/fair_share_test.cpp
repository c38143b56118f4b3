// The simulator's max-min fair share solver, on cases computed by hand.
#include <gtest/gtest.h>

#include "sim/fair_share.hpp"

using th::sim::max_min_rates;

namespace {

void expect_rates(const std::vector<double> &got, const std::vector<double> &want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-9) << "flow " << i;
}

}  // namespace

TEST(FairShare, OneLinkSplitsEvenly) { expect_rates(max_min_rates({10}, {{0}, {0}}), {5, 5}); }

TEST(FairShare, NothingToShare) {
    expect_rates(max_min_rates({}, {}), {});
    expect_rates(max_min_rates({10}, {{}}), {0});
}

// A (10) carries f0 and f1, B (4) carries f1 and f2: B is the bottleneck
// (2 each); f0 takes what f1 leaves of A.
TEST(FairShare, LeftoverGoesToTheUnconstrainedFlow) {
    expect_rates(max_min_rates({10, 4}, {{0}, {0, 1}, {1}}), {8, 2, 2});
}

// Parking lot: f0 crosses both unit links, f1 and f2 one each.
TEST(FairShare, ParkingLot) { expect_rates(max_min_rates({1, 1}, {{0, 1}, {0}, {1}}), {0.5, 0.5, 0.5}); }

// A source's uplink (12) feeds three readers; one reader's downlink is 3.
TEST(FairShare, SlowReceiverFreesTheSourceForOthers) {
    expect_rates(max_min_rates({12, 3, 20, 20}, {{0, 1}, {0, 2}, {0, 3}}), {3, 4.5, 4.5});
}

// Two tiers: a thin WAN (2) shared by two flows, one of which also shares a
// host uplink (10) with a local flow.
TEST(FairShare, ThinWanThenHostLink) {
    expect_rates(max_min_rates({10, 2}, {{0, 1}, {1}, {0}}), {1, 1, 9});
}

// Three bottlenecks, filled in order of tightness.
TEST(FairShare, SaturatesEveryBottleneck) {
    std::vector<double> cap = {7, 5, 3};
    std::vector<std::vector<int>> flows = {{0}, {0, 1}, {1, 2}, {2}, {0, 2}};
    auto r = max_min_rates(cap, flows);
    // Link 2 (3) has three flows: 1 each. Link 0 (7) then has 6 for f0
    // and f1 (3 each), which link 1 (5 - 1 = 4 left for f1) allows.
    expect_rates(r, {3, 3, 1, 1, 1});
}
