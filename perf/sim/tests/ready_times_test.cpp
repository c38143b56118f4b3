// The simulator starts readers at the ready times it is given (a measured
// run's), for every method, and checks them.
#include <gtest/gtest.h>

#include <stdexcept>

#include "sim/cluster.hpp"

// Qualified: inside a TEST, a plain Setup is gtest's.
namespace sim = th::sim;
using sim::Method;
using sim::method_name;
using sim::reader_ready_times;
using sim::Result;
using sim::simulate;

namespace {

constexpr Method kMethods[] = {Method::TensorHub, Method::TrainerDirect, Method::Collective, Method::Store};

// Two readers, the second ready well after the first is done. A stagger
// draw is set too: the explicit offsets must win over it.
sim::Setup two_readers(double late_s) {
    sim::Setup s;
    s.readers = 2;
    s.size_bytes = 8ull << 20;
    s.chunk_bytes = 512 << 10;
    s.stagger_s = 100;
    s.ready_offsets_s = {0, late_s};
    return s;
}

double floor_of(const sim::Setup &s) { return double(s.size_bytes) / s.host_bps; }

}  // namespace

TEST(ReadyTimes, ExplicitOffsetsReplaceTheStaggerDraw) {
    sim::Setup s = two_readers(0.5);
    EXPECT_EQ(reader_ready_times(s), (std::vector<double>{0, 0.5}));
    s.ready_offsets_s.clear();
    std::vector<double> drawn = reader_ready_times(s);
    ASSERT_EQ(drawn.size(), 2u);
    for (double t : drawn) EXPECT_TRUE(t >= 0 && t <= s.stagger_s) << t;
    EXPECT_EQ(drawn, reader_ready_times(s)) << "the draw is seeded";
    s.stagger_s = 0;
    EXPECT_EQ(reader_ready_times(s), (std::vector<double>{0, 0}));
}

TEST(ReadyTimes, OffsetsThatDoNotFitAreRefused) {
    sim::Setup s = two_readers(0.5);
    s.ready_offsets_s = {0, 0.5, 1};
    EXPECT_THROW(reader_ready_times(s), std::invalid_argument);
    EXPECT_THROW(simulate(s, Method::TrainerDirect), std::invalid_argument);
    s.ready_offsets_s = {0, -1};
    EXPECT_THROW(reader_ready_times(s), std::invalid_argument);
}

// Every method's floor is the last reader's ready time plus S/B, and none
// finishes before it.
TEST(ReadyTimes, EveryMethodWaitsForTheLastReader) {
    sim::Setup s = two_readers(0.5);
    double b = floor_of(s);
    for (Method m : kMethods) {
        Result r = simulate(s, m);
        EXPECT_TRUE(r.violations.empty()) << method_name(m) << ": " << r.violations.front();
        EXPECT_NEAR(r.floor_s, 0.5 + b, 1e-9) << method_name(m);
        EXPECT_GE(r.makespan_s, 0.5 + b - 1e-9) << method_name(m);
        EXPECT_LE(r.makespan_s, 0.5 + 1.1 * b) << method_name(m);
        EXPECT_NEAR(r.update_s, r.makespan_s, 1e-9) << method_name(m) << ": the first reader is ready at 0";
    }
}

// Trainer-direct: the first reader is done long before the second is ready,
// so each reads alone at B and stalls exactly S/B.
TEST(ReadyTimes, TrainerDirectReadersStartAtTheirOffsets) {
    sim::Setup s = two_readers(0.5);
    double b = floor_of(s);
    Result r = simulate(s, Method::TrainerDirect);
    EXPECT_NEAR(r.makespan_s, 0.5 + b, 1e-6);
    EXPECT_NEAR(r.reader_stall_s, 2 * b, 1e-6);
}

// The collective starts when the last reader is ready: the first one waits
// for it, so the summed stall carries the offset once.
TEST(ReadyTimes, CollectiveStartsWhenTheLastReaderIsReady) {
    sim::Setup s = two_readers(0.5);
    double b = floor_of(s);
    Result r = simulate(s, Method::Collective);
    EXPECT_GE(r.reader_stall_s, 0.5 + 2 * b - 1e-9);
    EXPECT_LE(r.reader_stall_s, 0.5 + 2.2 * b);
    // The offsets are the readers' own: swapped, the same broadcast starts
    // at the same time.
    s.ready_offsets_s = {0.5, 0};
    EXPECT_NEAR(simulate(s, Method::Collective).makespan_s, r.makespan_s, 1e-9);
}
