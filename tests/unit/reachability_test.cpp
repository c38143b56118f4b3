// What the server makes of a reader that could not read from a source
// (server/reachability.hpp), through the service, on a clock the test moves.
#include <gtest/gtest.h>

#include "messages.hpp"
#include "server/reachability.hpp"
#include "server/service.hpp"

using namespace th;
using namespace th::test;

namespace {

// Worker 1 publishes version 1 of "m"; 2 and 3 read it.
class ReachabilityTest : public ::testing::Test {
  protected:
    uint64_t now = 1'000'000;
    ServiceConfig cfg = [this] {
        ServiceConfig c;
        c.now_ms = [this] { return now; };
        return c;
    }();
    Service svc{cfg};
    uint64_t req = 1;
    std::vector<th::TensorSpec> ts = specs(8192);

    Bytes call(const Bytes &m) { return svc.handle(m.data(), m.size()); }
    void SetUp() override {
        for (uint64_t w : {1, 2, 3}) ASSERT_EQ(error_code(call(hello(w, req++))), 0);
        ASSERT_EQ(error_code(call(publish(1, req++, "m", 1, 0, 1, ts, 100))), 0);
    }
    void report(uint64_t reader, uint64_t source) { ASSERT_EQ(error_code(call(source_failed(reader, req++, source))), 0); }
    // Time passes; the workers named heartbeat at its end.
    void pass(uint64_t ms, std::initializer_list<uint64_t> heard = {1, 2, 3}) {
        now += ms;
        for (uint64_t w : heard) ASSERT_EQ(error_code(call(heartbeat(w, req++))), 0) << "worker " << w;
    }
    // The worker reader is planned to, or 0 when it is told no source is left.
    uint64_t source_for(uint64_t reader, uint64_t replica = 0) {
        Bytes r = call(plan(reader, req++, "m", 1, 0, replica, replica ? &ts : nullptr));
        if (env(r)->body_type() == Body::PlanReply) return env(r)->body_as_PlanReply()->ranges()->Get(0)->worker_id();
        EXPECT_EQ(error_code(r), TH_ERR_UNAVAILABLE) << error_text(r);
        return 0;
    }
    bool no_source_yet(uint64_t reader) {
        Bytes r = call(plan(reader, req++, "m", 1, 0));
        return env(r)->body_type() == Body::ErrorReply && env(r)->body_as_ErrorReply()->no_source_yet();
    }
    bool told_to_register(uint64_t worker) {
        Bytes r = call(heartbeat(worker, req++));
        return env(r)->body_type() == Body::ErrorReply && env(r)->body_as_ErrorReply()->unknown_worker();
    }
};

TEST_F(ReachabilityTest, OneReaderThatCannotReadASourceStillTalkingDoesNotTakeItFromTheOthers) {
    report(2, 1);
    EXPECT_EQ(source_for(3), 1u);  // still in service
    EXPECT_FALSE(told_to_register(1));
    EXPECT_TRUE(no_source_yet(2));  // nobody else holds it: 2 is told so
    Bytes r = call(plan(2, req++, "m", 1, 0));
    EXPECT_NE(error_text(r).find("failed this reader (1 tried: worker 1 'w1')"), std::string::npos) << error_text(r);
    // Once 3 holds it, 2 reads from 3.
    EXPECT_EQ(source_for(3, 300), 1u);
    ASSERT_EQ(error_code(call(fetch_done(3, req++, "m", 1, 0, 1, 16384, 300))), 0);
    EXPECT_EQ(source_for(2), 3u);
}

TEST_F(ReachabilityTest, AnAvoidedSourceIsTriedAgainLaterEachTimeTwiceAsLate) {
    report(2, 1);
    pass(Reachability::kFirstAvoidMs - 1);
    EXPECT_EQ(source_for(2), 0u);
    pass(2);
    EXPECT_EQ(source_for(2), 1u);  // tried again
    report(2, 1);                  // and failed again: twice as long
    pass(2 * Reachability::kFirstAvoidMs - 1);
    EXPECT_EQ(source_for(2), 0u);
    pass(2);
    EXPECT_EQ(source_for(2), 1u);
}

TEST_F(ReachabilityTest, AReadThatSucceedsOrANewAddressEndsTheAvoidance) {
    report(2, 1);
    report(2, 1);
    EXPECT_EQ(source_for(2), 0u);
    pass(100);  // a fetch (of 1 ms) that started after the reports
    ASSERT_EQ(error_code(call(fetch_done(2, req++, "m", 1, 0, 1, 16384))), 0);
    EXPECT_EQ(source_for(2), 1u);
    report(2, 1);
    EXPECT_EQ(source_for(2), 0u);
    // 1 registers with another address (a process resumed with a fresh
    // worker, or restarted): a new path, tried at once.
    ASSERT_EQ(error_code(call(hello(1, req++, {}, 0, "", 0, {5, 6, 7, 8}))), 0);
    ASSERT_EQ(error_code(call(publish(1, req++, "m", 1, 0, 1, ts, 100, 4096, true, true))), 0);
    EXPECT_EQ(source_for(2), 1u);
}

// What a fetch read from a source before its reader gave up on it says
// nothing about the path now.
TEST_F(ReachabilityTest, BytesReadBeforeGivingUpOnASourceDoNotEndItsAvoidance) {
    report(2, 1);
    ASSERT_EQ(error_code(call(fetch_done(2, req++, "m", 1, 0, 1, 16384))), 0);  // the same fetch ends
    EXPECT_EQ(source_for(2), 0u);
}

// Two readers of one rack cut off from a source do not take it from a
// third that reads from it meanwhile.
TEST_F(ReachabilityTest, ASourceAFetchReadFromSinceTheFirstReportStaysInService) {
    report(2, 1);
    pass(100);
    ASSERT_EQ(error_code(call(hello(4, req++))), 0);
    ASSERT_EQ(error_code(call(fetch_done(3, req++, "m", 1, 0, 1, 16384))), 0);
    report(4, 1);
    EXPECT_FALSE(told_to_register(1));
    EXPECT_EQ(source_for(3), 1u);
}

TEST_F(ReachabilityTest, ASourceThatFallsSilentAfterAReportIsTakenOutOfService) {
    report(2, 1);
    pass(2 * cfg.heartbeat_ms + 1, {2, 3});  // 1 says nothing
    EXPECT_EQ(source_for(3), 0u);
    Bytes r = call(plan(3, req++, "m", 1, 0));
    EXPECT_NE(error_text(r).find("no live holder"), std::string::npos) << error_text(r);
    EXPECT_TRUE(told_to_register(1));
}

TEST_F(ReachabilityTest, ASourceSilentWhenReportedIsTakenOutAtOnce) {
    pass(2 * cfg.heartbeat_ms + 1, {2, 3});  // 1 paused, say
    report(2, 1);
    EXPECT_EQ(source_for(3), 0u);
    EXPECT_TRUE(told_to_register(1));
}

TEST_F(ReachabilityTest, TwoReadersReportingASourceWithinALeaseTakeItOut) {
    report(2, 1);
    pass(cfg.lease_ms - 1);
    report(3, 1);
    EXPECT_TRUE(told_to_register(1));
}

TEST_F(ReachabilityTest, ReportsFartherApartThanALeaseDoNotAddUp) {
    report(2, 1);
    pass(cfg.lease_ms + 1);
    report(3, 1);
    EXPECT_FALSE(told_to_register(1));
}

// A reader told that no source is left waits for another holder; meanwhile
// its filling replica, which fills from nowhere, is nobody's source.
TEST_F(ReachabilityTest, AReplicaWhoseReaderHasNoSourceIsNotFollowed) {
    report(2, 1);
    EXPECT_EQ(source_for(2, 200), 0u);
    // A filling replica with no reads ranks before the publisher: without
    // the rule, 3 would follow 200.
    EXPECT_EQ(source_for(3), 1u);
    pass(Reachability::kFirstAvoidMs + 1);
    EXPECT_EQ(source_for(2, 200), 1u);  // 200 has a source again
    Bytes r = call(plan(3, req++, "m", 1, 0));
    ASSERT_EQ(env(r)->body_type(), Body::PlanReply);
    EXPECT_EQ(env(r)->body_as_PlanReply()->ranges()->Get(0)->replica_id(), 200u);
}

}  // namespace
