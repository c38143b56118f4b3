#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <regex>
#include <thread>

#include "messages.hpp"
#include "server/service.hpp"
#include "wire/status_json.hpp"

using namespace th;
using namespace th::test;

namespace {

class ServiceTest : public ::testing::Test {
  protected:
    uint64_t frozen_ms = 0;  // when set, the service's clock stands still there
    Service svc{[this] {
        ServiceConfig c;
        c.now_ms = [this] { return frozen_ms != 0 ? frozen_ms : now_ms(); };
        return c;
    }()};
    uint64_t req = 1;

    Bytes call(const Bytes &m) { return svc.handle(m.data(), m.size()); }
    void join(uint64_t worker, const Labels &l = {}) { ASSERT_EQ(error_code(call(hello(worker, req++, l))), 0); }
    // The state as JSON, without the fields that move with the clock.
    std::string state() {
        Bytes s = call(status(req++));
        std::string j = status_to_json(*env(s)->body_as_StatusReply());
        return std::regex_replace(j, std::regex("\"(uptime_ms|last_seen_ms_ago)\":[0-9]+"), "");
    }
};

// The workers a plan names as sources.
std::set<uint64_t> plan_sources(const Bytes &r) {
    std::set<uint64_t> out;
    EXPECT_EQ(env(r)->body_type(), Body::PlanReply) << error_text(r);
    if (env(r)->body_type() == Body::PlanReply)
        for (const auto *range : *env(r)->body_as_PlanReply()->ranges()) out.insert(range->worker_id());
    return out;
}

// The chunks a heartbeat reply asks its worker to check, by replica.
using Checks = std::map<uint64_t, std::vector<uint32_t>>;
Checks chunk_checks(const Bytes &r) {
    Checks out;
    EXPECT_EQ(env(r)->body_type(), Body::HeartbeatReply) << error_text(r);
    if (env(r)->body_type() != Body::HeartbeatReply) return out;
    if (const auto *c = env(r)->body_as_HeartbeatReply()->check())
        for (const ChunkCheck *cc : *c) out[cc->replica_id()].assign(cc->chunks()->begin(), cc->chunks()->end());
    return out;
}

// A reader's report that these chunks of worker's replica do not match
// their checksums.
Bytes mismatch_report(uint64_t reader, uint64_t req, uint64_t worker, uint64_t replica,
                      const std::vector<uint32_t> &chunks) {
    Builder b;
    return finish(b, hdr(reader, req),
                  CreateSourceFailed(b, worker, b.CreateString("chunk does not match the version's checksum"), replica,
                                     b.CreateVector(chunks)));
}

}  // namespace

TEST_F(ServiceTest, CommitsOnlyWhenAllShardsArePublished) {
    join(1);
    auto ts = specs(8192);
    EXPECT_EQ(error_code(call(publish(1, req++, "m", 1, 0, 2, ts, 100))), 0);
    Builder b;
    Bytes r = call(finish(b, hdr(1, req++), CreateResolve(b, b.CreateString("m"), UINT64_MAX)));
    EXPECT_EQ(error_code(r), TH_ERR_NOT_FOUND);
    EXPECT_NE(error_text(r).find("no committed version"), std::string::npos);
    Builder b2;
    r = call(finish(b2, hdr(1, req++), CreateResolve(b2, b2.CreateString("m"), 1)));
    EXPECT_EQ(error_code(r), TH_ERR_NOT_COMMITTED);
    EXPECT_NE(error_text(r).find("1 of 2 shards"), std::string::npos) << error_text(r);
    EXPECT_EQ(error_code(call(plan(1, req++, "m", 1, 0))), TH_ERR_NOT_COMMITTED);

    r = call(publish(1, req++, "m", 1, 1, 2, ts, 101));
    ASSERT_EQ(env(r)->body_type(), Body::PublishReply);
    EXPECT_TRUE(env(r)->body_as_PublishReply()->committed());
    Builder b3;
    r = call(finish(b3, hdr(1, req++), CreateResolve(b3, b3.CreateString("m"), UINT64_MAX)));
    ASSERT_EQ(env(r)->body_type(), Body::ResolveReply);
    EXPECT_EQ(env(r)->body_as_ResolveReply()->version(), 1u);
    EXPECT_EQ(env(r)->body_as_ResolveReply()->num_shards(), 2u);
}

TEST_F(ServiceTest, RejectsConflictingPublishes) {
    join(1);
    join(2);
    auto ts = specs(8192);
    ASSERT_EQ(error_code(call(publish(1, req++, "m", 5, 0, 2, ts, 100))), 0);
    std::string before = state();
    Bytes r = call(publish(2, req++, "m", 5, 0, 2, specs(4096), 200));  // other layout
    EXPECT_EQ(error_code(r), TH_ERR_CONFLICT);
    EXPECT_NE(error_text(r).find("another layout"), std::string::npos) << error_text(r);
    r = call(publish(2, req++, "m", 5, 1, 3, ts, 201));  // other shard count
    EXPECT_EQ(error_code(r), TH_ERR_CONFLICT);
    EXPECT_NE(error_text(r).find("2 shards"), std::string::npos) << error_text(r);
    r = call(publish(2, req++, "m", 5, 1, 2, ts, 202, 8192));  // other chunk size
    EXPECT_EQ(error_code(r), TH_ERR_CONFLICT);
    r = call(publish(2, req++, "m", 5, 1, 2, specs(8192, 2, TH_DTYPE_FLOAT32), 203));  // dtype of t0 differs
    EXPECT_EQ(error_code(r), TH_ERR_CONFLICT);
    EXPECT_NE(error_text(r).find("'t0'"), std::string::npos) << error_text(r);
    r = call(publish(2, req++, "m", 5, 2, 2, ts, 204));  // shard out of range
    EXPECT_EQ(error_code(r), TH_ERR_INVALID_ARG);
    EXPECT_EQ(state(), before);  // nothing changed
    // The same layout from another worker adds a replica.
    EXPECT_EQ(error_code(call(publish(2, req++, "m", 5, 0, 2, ts, 205))), 0);
    // Once v5 commits, an older new version is refused.
    ASSERT_EQ(error_code(call(publish(1, req++, "m", 5, 1, 2, ts, 101))), 0);
    r = call(publish(1, req++, "m", 4, 0, 1, ts, 102));
    EXPECT_EQ(error_code(r), TH_ERR_CONFLICT);
    EXPECT_NE(error_text(r).find("older than the latest"), std::string::npos) << error_text(r);
}

TEST_F(ServiceTest, PlansRouteToReplicasAndCheckTheReadersLayout) {
    join(1);
    join(2);
    join(3);
    auto ts = specs(8192);
    ASSERT_EQ(error_code(call(publish(1, req++, "m", 1, 0, 1, ts, 100))), 0);
    Bytes r = call(plan(2, req++, "m", UINT64_MAX, 0, 200, &ts));
    ASSERT_EQ(env(r)->body_type(), Body::PlanReply) << error_text(r);
    const PlanReply *p = env(r)->body_as_PlanReply();
    EXPECT_EQ(p->version(), 1u);
    EXPECT_EQ(p->total_bytes(), 16384u);
    ASSERT_EQ(p->ranges()->size(), 1u);
    EXPECT_EQ(p->ranges()->Get(0)->worker_id(), 1u);
    EXPECT_EQ(p->ranges()->Get(0)->num_chunks(), 4u);
    // The second reader follows the first (filling, idle) rather than the busy publisher.
    r = call(plan(3, req++, "m", UINT64_MAX, 0, 300, &ts));
    ASSERT_EQ(env(r)->body_type(), Body::PlanReply) << error_text(r);
    EXPECT_EQ(env(r)->body_as_PlanReply()->ranges()->Get(0)->worker_id(), 2u);
    EXPECT_FALSE(env(r)->body_as_PlanReply()->ranges()->Get(0)->complete());

    auto wrong = specs(4096);
    r = call(plan(3, req++, "m", 1, 0, 0, &wrong));
    EXPECT_EQ(error_code(r), TH_ERR_LAYOUT_MISMATCH);
    EXPECT_NE(error_text(r).find("8192 bytes, 4096 given"), std::string::npos) << error_text(r);
    r = call(plan(3, req++, "m", 1, 3));
    EXPECT_EQ(error_code(r), TH_ERR_INVALID_ARG);
    EXPECT_NE(error_text(r).find("shard 3 is out of range"), std::string::npos) << error_text(r);
    r = call(plan(3, req++, "nope", 1, 0));
    EXPECT_EQ(error_code(r), TH_ERR_NOT_FOUND);
    EXPECT_NE(error_text(r).find("'nope'"), std::string::npos);
    r = call(plan(3, req++, "m", 9, 0));
    EXPECT_EQ(error_code(r), TH_ERR_NOT_FOUND);
    EXPECT_NE(error_text(r).find("no version 9"), std::string::npos);
}

TEST_F(ServiceTest, NoHolderMeansUnavailableAtOnce) {
    join(1);
    join(2);
    auto ts = specs(8192);
    ASSERT_EQ(error_code(call(publish(1, req++, "m", 1, 0, 1, ts, 100))), 0);
    Builder b;
    ASSERT_EQ(error_code(call(finish(b, hdr(1, req++), CreateRelease(b, 100)))), 0);
    Bytes r = call(plan(2, req++, "m", UINT64_MAX, 0));
    EXPECT_EQ(error_code(r), TH_ERR_UNAVAILABLE);
    EXPECT_NE(error_text(r).find("no live holder of model 'm' version 1 shard 0"), std::string::npos) << error_text(r);
}

// "Register again" is the reply's flag; its code keeps the meaning the header
// gives it (TH_ERR_CLOSED is a handle shutting down, never a server's answer).
TEST_F(ServiceTest, UnknownWorkersAreToldToRegister) {
    auto told_to_register = [&](const Bytes &r) {
        ASSERT_EQ(env(r)->body_type(), Body::ErrorReply);
        const ErrorReply *e = env(r)->body_as_ErrorReply();
        EXPECT_TRUE(e->unknown_worker());
        EXPECT_FALSE(e->rebuilding());
        EXPECT_EQ(e->code(), TH_ERR_UNAVAILABLE);
    };
    told_to_register(call(publish(77, req++, "m", 1, 0, 1, specs(8192), 100)));
    EXPECT_NE(error_text(call(publish(77, req++, "m", 1, 0, 1, specs(8192), 100))).find("worker 77 is not registered"),
              std::string::npos);
    // A worker two readers could not reach registers again before it is
    // used (reachability_test.cpp: when one reader is not enough).
    join(1);
    join(2);
    join(3);
    ASSERT_EQ(error_code(call(source_failed(1, req++, 2))), 0);
    ASSERT_EQ(error_code(call(source_failed(3, req++, 2))), 0);
    Builder b2;
    Bytes r = call(finish(b2, hdr(2, req++), CreateHeartbeat(b2)));
    told_to_register(r);
    EXPECT_NE(error_text(r).find("reported unreachable"), std::string::npos) << error_text(r);
    join(2);
    Builder b3;
    EXPECT_EQ(error_code(call(finish(b3, hdr(2, req++), CreateHeartbeat(b3)))), 0);
}

// A replica id is checked the same way by every request that names one: a
// client naming another worker's replica is broken (ids are its own), and
// nothing of the request is applied.
TEST_F(ServiceTest, AnotherWorkersReplicaIsOneProtocolError) {
    auto ts = specs(8192);
    join(1);
    ASSERT_EQ(error_code(call(publish(1, req++, "m", 1, 0, 1, ts, 100))), 0);
    join(2);  // names worker 1's replica in every request below
    std::string before = state();
    auto refused = [&](const Bytes &r, const char *what) {
        EXPECT_EQ(error_code(r), TH_ERR_PROTOCOL) << what;
        EXPECT_NE(error_text(r).find("replica 100 belongs to worker 1, not to 2"), std::string::npos)
            << what << ": " << error_text(r);
    };
    Builder b1, b2, b3, b4, b5;
    refused(call(finish(b1, hdr(2, req++), CreateRelease(b1, 100))), "Release");
    refused(call(finish(b2, hdr(2, req++), CreateBeginMutation(b2, 100))), "BeginMutation");
    refused(call(finish(b3, hdr(2, req++), CreateCancelMutation(b3, 100))), "CancelMutation");
    refused(call(finish(b4, hdr(2, req++), CreateProgress(b4, 100, 1))), "Progress");
    std::vector<flatbuffers::Offset<SourceBytes>> from{CreateSourceBytes(b5, 1, 16384, 100)};
    refused(call(finish(b5, hdr(2, req++), CreateFetchDone(b5, b5.CreateString("m"), 1, 0, 100, true, b5.CreateVector(from), 1000))),
            "FetchDone");
    refused(call(plan(2, req++, "m", 1, 0, 100, &ts)), "PlanFetch");
    refused(call(publish(2, req++, "m", 2, 0, 1, ts, 100)), "Publish");
    EXPECT_EQ(state(), before);
}

TEST_F(ServiceTest, EveryRequestChecksTheModelNameAlike) {
    join(1);
    std::string long_name(256, 'm');
    Builder b1, b2, b3;
    for (const Bytes &r : {call(publish(1, req++, long_name, 1, 0, 1, specs(8192), 100)), call(plan(1, req++, long_name, 1, 0)),
                           call(finish(b1, hdr(1, req++), CreateResolve(b1, b1.CreateString(long_name), 1))),
                           call(finish(b2, hdr(1, req++), CreatePin(b2, b2.CreateString(long_name), 1, true)))}) {
        EXPECT_EQ(error_code(r), TH_ERR_INVALID_ARG);
        EXPECT_EQ(error_text(r), "model name longer than 255 bytes");
    }
    Bytes r = call(finish(b3, hdr(1, req++), CreateResolve(b3, 0, 1)));
    EXPECT_EQ(error_code(r), TH_ERR_PROTOCOL);
    EXPECT_EQ(error_text(r), "model name is missing");
}

TEST_F(ServiceTest, OnlyAHelloWithANewerEpochMakesTheServerTakeOver) {
    auto hello_at = [&](uint64_t worker, uint64_t epoch) { return call(hello(worker, req++, {}, epoch)); };
    auto rebuilding = [&](uint64_t worker) {
        Bytes r = call(plan(worker, req++, "nobody", UINT64_MAX, 0));
        return env(r)->body_type() == Body::ErrorReply && env(r)->body_as_ErrorReply()->rebuilding();
    };
    uint64_t epoch = env(call(hello(1, req++)))->epoch();
    // A worker registering again (after a pause, say) knows our own epoch.
    Bytes r = hello_at(1, epoch);
    ASSERT_EQ(error_code(r), 0);
    EXPECT_EQ(env(r)->epoch(), epoch);
    EXPECT_FALSE(rebuilding(1)) << "a model nobody published must be unknown at once";
    EXPECT_EQ(error_text(call(plan(1, req++, "nobody", UINT64_MAX, 0))), "model 'nobody' is unknown to the server");
    // One that was served by a newer server (now gone) makes us take over.
    r = hello_at(2, epoch + 10);
    ASSERT_EQ(error_code(r), 0);
    EXPECT_EQ(env(r)->epoch(), epoch + 11);
    EXPECT_TRUE(rebuilding(2)) << "just after a takeover, unknown may mean not re-declared yet";
    // The answer a client ends with, once it has asked again for as long as
    // its call lasts, says why it may be wrong.
    std::string text = error_text(call(plan(2, req++, "nobody", UINT64_MAX, 0)));
    EXPECT_EQ(text.rfind("model 'nobody' is unknown to the server; this server took over ", 0), 0u) << text;
    EXPECT_NE(text.find(" ms ago and its workers may not have declared it yet"), std::string::npos) << text;
}

// A standby before its first takeover cannot tell "unknown" from "not
// declared to me yet"; a client pointed at it hears why in the end.
TEST(ServiceTakeover, AStandbyThatHasNotTakenOverSaysSoWithWhatItDoesNotKnow) {
    ServiceConfig cfg;
    cfg.standby = true;
    Service svc(cfg);
    uint64_t req = 1;
    Bytes r = svc.handle(hello(1, req).data(), hello(1, req).size());
    ASSERT_EQ(error_code(r), 0);
    Builder b;
    Bytes m = finish(b, hdr(1, ++req), CreateResolve(b, b.CreateString("m"), UINT64_MAX));
    r = svc.handle(m.data(), m.size());
    EXPECT_EQ(error_code(r), TH_ERR_NOT_FOUND);
    EXPECT_EQ(error_text(r), "model 'm' is unknown to the server; this server is a standby that has not taken over "
                             "(it does when workers fail over to it), and their replicas may not have been declared to it");
}

// List mode: a Hello that would make the server take over names the server
// the worker left; the server asks it (on the probe's thread, answering
// "probing" meanwhile) and takes over only if it does not answer, or answers
// with an older epoch (a server restarted there). An answer stands for
// TakeoverProbe::kKeepMs of the service's clock.
TEST(ServiceTakeover, AServerDoesNotTakeOverFromOneThatStillAnswers) {
    std::mutex mu;
    std::vector<std::pair<std::string, uint32_t>> pinged;
    uint64_t answers = 0;  // 0: the left server does not answer
    std::atomic<uint64_t> clock{1000};
    ServiceConfig cfg;
    cfg.now_ms = [&] { return clock.load(); };
    cfg.ping_server = [&](const std::string &url, uint32_t ms) -> uint64_t {
        std::lock_guard lk(mu);
        pinged.emplace_back(url, ms);
        if (answers == 0) throw Error(TH_ERR_UNAVAILABLE, "no answer");
        return answers;
    };
    auto set_answer = [&](uint64_t epoch) {
        std::lock_guard lk(mu);
        answers = epoch;
        clock += TakeoverProbe::kKeepMs + 1;  // the last answer no longer stands
    };
    auto pings = [&] {
        std::lock_guard lk(mu);
        return pinged;
    };
    Service svc(cfg);
    uint64_t req = 1;
    auto call = [&](const Bytes &m) { return svc.handle(m.data(), m.size()); };
    int probing = 0;
    // Says Hello until the answer is not "probing" (the probe runs on a thread).
    auto hello_until_known = [&](uint64_t worker, uint64_t epoch, const std::string &left, uint32_t ms) {
        for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);;) {
            Bytes r = call(hello(worker, req++, {}, epoch, left, ms));
            if (env(r)->body_type() != Body::ErrorReply || !env(r)->body_as_ErrorReply()->probing()) return r;
            EXPECT_EQ(error_code(r), TH_ERR_UNAVAILABLE);
            EXPECT_NE(error_text(r).find("say Hello again"), std::string::npos) << error_text(r);
            probing++;
            if (std::chrono::steady_clock::now() > until) ADD_FAILURE() << "still probing after 10 s";
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    };
    const uint64_t epoch = env(call(hello(1, req++)))->epoch();
    const uint64_t theirs = epoch + 10;
    // The left server answers at the worker's epoch: no takeover.
    set_answer(theirs);
    Bytes r = hello_until_known(2, theirs, "tcp://a:1", 250);
    EXPECT_GE(probing, 1) << "the first Hello must not wait for the ping";
    EXPECT_EQ(error_code(r), TH_ERR_UNAVAILABLE);
    ASSERT_EQ(env(r)->body_type(), Body::ErrorReply);
    EXPECT_TRUE(env(r)->body_as_ErrorReply()->left_server_alive());
    EXPECT_NE(error_text(r).find("tcp://a:1 still answers"), std::string::npos) << error_text(r);
    EXPECT_EQ(svc.epoch(), epoch);
    ASSERT_EQ(pings().size(), 1u);
    EXPECT_EQ(pings()[0], std::make_pair(std::string("tcp://a:1"), 250u));
    // Other workers failing over from the same server meanwhile hear the
    // same answer without another ping.
    r = call(hello(3, req++, {}, theirs, "tcp://a:1", 250));
    EXPECT_TRUE(env(r)->body_as_ErrorReply()->left_server_alive()) << error_text(r);
    EXPECT_EQ(pings().size(), 1u);
    // A Hello at our own epoch (a worker registering again) pings nobody.
    EXPECT_EQ(error_code(call(hello(1, req++, {}, epoch, "tcp://a:1", 250))), 0);
    EXPECT_EQ(pings().size(), 1u);
    // The wait a Hello may ask for is capped.
    set_answer(theirs + 1);
    EXPECT_EQ(error_code(hello_until_known(2, theirs, "tcp://a:1", 60000)), TH_ERR_UNAVAILABLE);
    EXPECT_EQ(pings().back().second, TakeoverProbe::kMaxProbeMs);
    // A server restarted at that address answers with an older epoch.
    set_answer(theirs - 1);
    r = hello_until_known(2, theirs, "tcp://a:1", 250);
    ASSERT_EQ(error_code(r), 0) << error_text(r);
    EXPECT_EQ(svc.epoch(), theirs + 1);
    // Nobody answers: take over (again, above a newer worker's epoch).
    set_answer(0);
    ASSERT_EQ(error_code(hello_until_known(3, theirs + 5, "tcp://a:1", 250)), 0);
    EXPECT_EQ(svc.epoch(), theirs + 6);
    EXPECT_EQ(pings().size(), 4u);
}

// The probe never holds up the request that starts it: a ping that takes
// long leaves every Hello meanwhile answered "probing" at once.
TEST(ServiceTakeover, ASlowPingHoldsUpNoRequest) {
    std::mutex mu;
    std::condition_variable cv;
    bool release = false;
    int pinged = 0;
    ServiceConfig cfg;
    cfg.ping_server = [&](const std::string &, uint32_t) -> uint64_t {
        std::unique_lock lk(mu);
        pinged++;
        cv.wait(lk, [&] { return release; });
        throw Error(TH_ERR_TIMEOUT, "no answer in time");
    };
    Service svc(cfg);
    uint64_t req = 1;
    auto call = [&](const Bytes &m) { return svc.handle(m.data(), m.size()); };
    const uint64_t epoch = env(call(hello(1, req++)))->epoch();
    for (int i = 0; i < 8; ++i) {
        Bytes r = call(hello(2 + i, req++, {}, epoch + 10, "tcp://a:1", 2000));
        ASSERT_EQ(env(r)->body_type(), Body::ErrorReply);
        EXPECT_TRUE(env(r)->body_as_ErrorReply()->probing()) << error_text(r);
    }
    EXPECT_EQ(error_code(call(heartbeat(1, req++))), 0) << "other requests are answered meanwhile";
    {
        std::lock_guard lk(mu);
        EXPECT_LE(pinged, 1) << "one probe per server asked about";
        release = true;
    }
    cv.notify_all();
    for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);;) {
        Bytes r = call(hello(2, req++, {}, epoch + 10, "tcp://a:1", 2000));
        if (error_code(r) == 0) break;
        ASSERT_TRUE(env(r)->body_as_ErrorReply()->probing()) << error_text(r);
        ASSERT_LT(std::chrono::steady_clock::now(), until) << "still probing after 10 s";
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(svc.epoch(), epoch + 11);
    std::lock_guard lk(mu);
    EXPECT_EQ(pinged, 1);
}

// What a client from before the ping sends.
TEST(ServiceTakeover, AHelloWithoutALeftServerTakesOverWithoutAPing) {
    bool pinged = false;
    ServiceConfig cfg;
    cfg.ping_server = [&](const std::string &, uint32_t) -> uint64_t {
        pinged = true;
        return UINT64_MAX;
    };
    Service svc(cfg);
    uint64_t req = 1;
    auto call = [&](const Bytes &m) { return svc.handle(m.data(), m.size()); };
    const uint64_t epoch = env(call(hello(1, req++)))->epoch();
    ASSERT_EQ(error_code(call(hello(2, req++, {}, epoch + 10))), 0);
    EXPECT_EQ(svc.epoch(), epoch + 11);
    EXPECT_FALSE(pinged);
}

// After a takeover, a version its holders saw committed is committed again
// even when one shard's holders moved on before: a reader of that shard hears
// "no live holder", not "not committed".
TEST_F(ServiceTest, AVersionDeclaredAgainAsCommittedStaysCommitted) {
    uint64_t epoch = env(call(hello(1, req++)))->epoch();
    ASSERT_EQ(error_code(call(hello(2, req++, {}, epoch + 10))), 0);  // takes over
    // Shard 0 of versions 4 and 5 of 2 shards; only version 5's holder saw it committed.
    ASSERT_EQ(error_code(call(publish(2, req++, "m", 5, 0, 2, specs(8192), 200, 4096, true, true))), 0);
    ASSERT_EQ(error_code(call(publish(2, req++, "m", 4, 0, 2, specs(8192), 201, 4096, true, false))), 0);
    Builder b;
    Bytes r = call(finish(b, hdr(2, req++), CreateResolve(b, b.CreateString("m"), UINT64_MAX)));
    ASSERT_EQ(env(r)->body_type(), Body::ResolveReply) << error_text(r);
    EXPECT_EQ(env(r)->body_as_ResolveReply()->version(), 5u);
    EXPECT_EQ(error_code(call(plan(1, req++, "m", 5, 0))), 0);
    r = call(plan(1, req++, "m", 5, 1));
    EXPECT_EQ(error_code(r), TH_ERR_UNAVAILABLE);
    EXPECT_NE(error_text(r).find("no live holder"), std::string::npos) << error_text(r);
    EXPECT_EQ(error_code(call(plan(1, req++, "m", 4, 0))), TH_ERR_NOT_COMMITTED);
    // Outside a rebuild the flag means nothing: a first publish commits only
    // with every shard.
    ASSERT_EQ(error_code(call(publish(2, req++, "n", 1, 0, 2, specs(8192), 300, 4096, false, true))), 0);
    EXPECT_EQ(error_code(call(plan(1, req++, "n", 1, 0))), TH_ERR_NOT_COMMITTED);
}

TEST_F(ServiceTest, GarbageGetsAnErrorAndChangesNothing) {
    join(1);
    ASSERT_EQ(error_code(call(publish(1, req++, "m", 1, 0, 1, specs(8192), 100))), 0);
    std::string before = state();
    std::mt19937 rng(7);
    Bytes good = publish(1, 999, "m", 2, 0, 1, specs(8192), 101);
    for (int i = 0; i < 500; ++i) {
        Bytes g = good;
        if (i % 2 == 0) {
            g.resize(rng() % (g.size() - 16));  // the tail may be padding
        } else {
            for (auto &x : g) x = static_cast<uint8_t>(rng());
        }
        Bytes r = call(g);
        EXPECT_EQ(error_code(r), TH_ERR_PROTOCOL);
    }
    Bytes huge(wire::kMaxMessageBytes + 1, 0);
    EXPECT_EQ(error_code(call(huge)), TH_ERR_PROTOCOL);
    EXPECT_EQ(state(), before);
}

TEST_F(ServiceTest, CorruptedRequestsAlwaysGetAWellFormedReply) {
    join(1);
    Bytes good = publish(1, 999, "m", 2, 0, 1, specs(8192), 101);
    for (size_t i = 0; i < good.size(); ++i)
        for (uint8_t flip : {0x01, 0x80, 0xff}) {
            Bytes g = good;
            g[i] ^= flip;
            Bytes r = call(g);
            EXPECT_NO_THROW(verify(r.data(), r.size()));
        }
}

TEST_F(ServiceTest, RetriedRequestsAreAppliedOnce) {
    join(1);
    Bytes m = publish(1, 555, "m", 1, 0, 1, specs(8192), 100);
    Bytes a = call(m), b = call(m);
    EXPECT_EQ(a, b);
    std::string s = state();
    EXPECT_EQ(s.find("\"replica_id\":100"), s.rfind("\"replica_id\":100"));
}

// A reader's report of chunks that did not match their checksums stops
// routing to that replica alone, until its holder has checked its own copy:
// intact, and it is routed to again; corrupt, and the server forgets it.
TEST_F(ServiceTest, AReplicaReportedCorruptWaitsForItsHoldersOwnCheck) {
    for (uint64_t w = 1; w <= 8; ++w) join(w);
    auto ts = specs(8192);
    ASSERT_EQ(error_code(call(publish(1, req++, "m", 1, 0, 1, ts, 100))), 0);
    ASSERT_EQ(error_code(call(publish(2, req++, "m", 1, 0, 1, ts, 200))), 0);
    ASSERT_EQ(error_code(call(publish(2, req++, "other", 1, 0, 1, ts, 201))), 0);
    auto sources = [&](uint64_t reader, const char *model = "m") {
        return plan_sources(call(plan(reader, req++, model, UINT64_MAX, 0)));
    };
    auto report = [&](uint64_t reader, uint64_t worker, uint64_t replica, std::vector<uint32_t> chunks) {
        return error_code(call(mismatch_report(reader, req++, worker, replica, chunks)));
    };
    auto checks = [&](uint64_t worker) { return chunk_checks(call(heartbeat(worker, req++))); };
    auto checked = [&](uint64_t worker, uint64_t replica, std::vector<uint32_t> chunks, bool match) {
        Builder b;
        return error_code(
            call(finish(b, hdr(worker, req++), CreateChunksChecked(b, replica, b.CreateVector(chunks), match))));
    };

    ASSERT_EQ(report(3, 2, 200, {1, 3}), 0);
    ASSERT_EQ(report(4, 2, 200, {3, 0}), 0);
    ASSERT_EQ(report(4, 2, 100, {1}), 0);  // not worker 2's: nothing happens
    ASSERT_EQ(report(5, 2, 200, {0, 1}), 0);  // all listed already: not counted again
    EXPECT_EQ(checks(2), (Checks{{200, {1, 3, 0}}}));
    EXPECT_EQ(checks(1), Checks{});
    EXPECT_TRUE(std::regex_search(state(), std::regex("\"replica_id\":200,[^}]*\"reported_chunks\":3,"))) << state();
    // Worker 2 stays registered and its other replica is routed to; the
    // reported one is not (reader 4 would have gone to the idle holder).
    EXPECT_EQ(sources(3), (std::set<uint64_t>{1}));
    EXPECT_EQ(sources(4), (std::set<uint64_t>{1}));
    EXPECT_EQ(sources(5, "other"), (std::set<uint64_t>{2}));

    // Registering again (twice, here) does not clear a report: the replica
    // declared again is still left out until its holder has checked it.
    join(2);
    join(2);
    EXPECT_EQ(checks(2), Checks{});  // declares nothing yet
    ASSERT_EQ(error_code(call(publish(2, req++, "m", 1, 0, 1, ts, 200, 4096, /*again=*/true, true))), 0);
    ASSERT_EQ(error_code(call(publish(2, req++, "other", 1, 0, 1, ts, 201, 4096, true, true))), 0);
    EXPECT_EQ(checks(2), (Checks{{200, {1, 3, 0}}}));
    EXPECT_EQ(sources(5), (std::set<uint64_t>{1}));

    // Its holder found two of the chunks intact; the third is still to check.
    ASSERT_EQ(checked(2, 200, {1, 3}, true), 0);
    EXPECT_EQ(checks(2), (Checks{{200, {0}}}));
    EXPECT_EQ(sources(6), (std::set<uint64_t>{1}));
    ASSERT_EQ(checked(2, 200, {0}, true), 0);
    EXPECT_EQ(checks(2), Checks{});
    EXPECT_EQ(sources(7), (std::set<uint64_t>{2}));  // the idler holder again

    // Reported again, and this time its holder's copy is corrupt: gone.
    ASSERT_EQ(report(3, 2, 200, {2}), 0);
    ASSERT_EQ(checked(2, 200, {2}, false), 0);
    EXPECT_EQ(checks(2), Checks{});
    EXPECT_EQ(state().find("\"replica_id\":200"), std::string::npos) << state();
    EXPECT_NE(state().find("\"replica_id\":201"), std::string::npos);
    EXPECT_EQ(sources(8), (std::set<uint64_t>{1}));
    // An answer about a replica the server no longer knows changes nothing.
    ASSERT_EQ(checked(2, 200, {2}, true), 0);
    EXPECT_EQ(state().find("\"replica_id\":200"), std::string::npos);
    std::string metrics = svc.metrics_text();
    EXPECT_NE(metrics.find("tensorhub_failures_total{kind=\"checksum_mismatch\"} 3"), std::string::npos) << metrics;
    EXPECT_NE(metrics.find("tensorhub_failures_total{kind=\"corrupt_replica\"} 1"), std::string::npos) << metrics;
    EXPECT_NE(metrics.find("tensorhub_failures_total{kind=\"source_failed\"} 0"), std::string::npos) << metrics;
}

// Just after a takeover a reader may report chunks of a replica that its
// holder has not declared here yet (readers send their recent reports again
// when they move to a new server): the report waits for the declaration, so
// that the replica is not routed to before its holder has checked it. Once
// the server is rebuilt, such reports are dropped.
TEST(ServiceTakeover, AMismatchReportedBeforeItsReplicaIsDeclaredAgainWaitsForIt) {
    std::atomic<uint64_t> clock{1000};
    ServiceConfig cfg;
    cfg.standby = true;
    cfg.now_ms = [&] { return clock.load(); };
    Service svc(cfg);
    uint64_t req = 1;
    auto call = [&](const Bytes &m) { return svc.handle(m.data(), m.size()); };
    auto report = [&](uint64_t reader, uint64_t worker, uint64_t replica, std::vector<uint32_t> chunks) {
        return error_code(call(mismatch_report(reader, req++, worker, replica, chunks)));
    };
    auto checks = [&](uint64_t worker) { return chunk_checks(call(heartbeat(worker, req++))); };
    auto sources = [&](uint64_t reader) { return plan_sources(call(plan(reader, req++, "m", UINT64_MAX, 0))); };
    auto ts = specs(8192);

    // The reader reaches the standby first, from a server of a newer epoch:
    // it takes over, and knows no holder.
    ASSERT_EQ(error_code(call(hello(3, req++, {}, uint64_t{1} << 40))), 0);
    ASSERT_EQ(report(3, 2, 200, {1, 3}), 0);
    ASSERT_EQ(report(3, 2, 200, {3, 0}), 0);
    ASSERT_EQ(report(3, 2, 201, {0}), 0);  // a replica never declared again
    ASSERT_EQ(report(3, 7, 700, {0}), 0);  // nor this one, until the next takeover
    // The holders come back and declare what they hold.
    for (uint64_t w : {1, 2}) ASSERT_EQ(error_code(call(hello(w, req++))), 0);
    ASSERT_EQ(error_code(call(publish(1, req++, "m", 1, 0, 1, ts, 100, 4096, /*again=*/true, true))), 0);
    ASSERT_EQ(error_code(call(publish(2, req++, "m", 1, 0, 1, ts, 200, 4096, /*again=*/true, true))), 0);
    EXPECT_EQ(checks(2), (Checks{{200, {1, 3, 0}}}));
    EXPECT_EQ(checks(1), Checks{});
    for (uint64_t reader : {4, 5}) {
        ASSERT_EQ(error_code(call(hello(reader, req++))), 0);
        EXPECT_EQ(sources(reader), (std::set<uint64_t>{1}));  // not the reported replica
    }
    // The reader's session sends its report again once it has registered
    // with the new server: nothing new, counted once.
    ASSERT_EQ(report(3, 2, 200, {1, 3}), 0);
    EXPECT_EQ(checks(2), (Checks{{200, {1, 3, 0}}}));
    EXPECT_NE(svc.metrics_text().find("tensorhub_failures_total{kind=\"checksum_mismatch\"} 1"), std::string::npos)
        << svc.metrics_text();

    // Rebuilt: a report about a replica this server does not know is dropped.
    clock += cfg.lease_ms + 1;
    for (uint64_t w : {1, 2, 3}) ASSERT_EQ(error_code(call(heartbeat(w, req++))), 0);
    ASSERT_EQ(report(3, 6, 600, {0}), 0);
    ASSERT_EQ(error_code(call(hello(6, req++))), 0);
    ASSERT_EQ(error_code(call(publish(6, req++, "m", 1, 0, 1, ts, 600, 4096, /*again=*/true, true))), 0);
    EXPECT_EQ(checks(6), Checks{});

    // Another takeover: what was kept during the last one no longer applies.
    ASSERT_EQ(error_code(call(hello(8, req++, {}, uint64_t{1} << 41))), 0);
    ASSERT_EQ(error_code(call(hello(7, req++))), 0);
    ASSERT_EQ(error_code(call(publish(7, req++, "m", 1, 0, 1, ts, 700, 4096, /*again=*/true, true))), 0);
    EXPECT_EQ(checks(7), Checks{});
}

TEST_F(ServiceTest, ExpiredLeasesDropWorkersAndTheirReplicas) {
    join(1);
    join(2);
    ASSERT_EQ(error_code(call(publish(1, req++, "m", 1, 0, 1, specs(8192), 100))), 0);
    EXPECT_EQ(svc.expire(now_ms() + ServiceConfig{}.lease_ms + 1), 2u);
    EXPECT_EQ(state().find("\"worker_id\":1,"), std::string::npos);
    Bytes r = call(hello(2, req++));
    r = call(plan(2, req++, "m", UINT64_MAX, 0));
    EXPECT_EQ(error_code(r), TH_ERR_UNAVAILABLE);
}

TEST_F(ServiceTest, ForgetsVersionsNobodyHoldsExceptTheLatest) {
    join(1);
    auto ts = specs(8192);
    ASSERT_EQ(error_code(call(publish(1, req++, "m", 1, 0, 1, ts, 100))), 0);
    ASSERT_EQ(error_code(call(publish(1, req++, "m", 2, 0, 1, ts, 101))), 0);
    Builder b;
    ASSERT_EQ(error_code(call(finish(b, hdr(1, req++), CreateRelease(b, 100)))), 0);
    Bytes r = call(plan(1, req++, "m", 1, 0));
    EXPECT_EQ(error_code(r), TH_ERR_NOT_FOUND);
    Builder b2;
    ASSERT_EQ(error_code(call(finish(b2, hdr(1, req++), CreateRelease(b2, 101)))), 0);
    EXPECT_NE(state().find("\"latest\":2"), std::string::npos);  // still the latest, unavailable
}

// Plans look at the reader's host, then its rack or zone, before every holder
// (planner.cpp); whatever the labels, loads and exclusions, the source must be
// the one the policy picks among all holders.
TEST_F(ServiceTest, PlansPickWhatThePolicyPicksAmongAllHolders) {
    std::mt19937 rng(7);
    auto pick = [&](std::vector<const char *> options) { return options[rng() % options.size()]; };
    auto random_labels = [&] {
        Labels l;
        for (auto [key, value] : {std::pair{"dc", pick({"", "a", "b"})}, {"rack", pick({"", "r1", "r2", "r3"})},
                                  {"zone", pick({"", "", "z1"})}, {"host", pick({"", "h1", "h2", "h3", "h4", "h5"})}})
            if (*value) l[key] = value;
        return l;
    };
    frozen_ms = now_ms();  // nobody falls silent, no avoidance runs out (reachability_test.cpp)
    const uint64_t kWorkers = 40;
    for (uint64_t w = 1; w <= kWorkers; ++w) join(w, random_labels());
    auto ts = specs(8192);
    ASSERT_EQ(error_code(call(publish(1, req++, "m", 1, 0, 1, ts, 1000))), 0);
    // Replica ids grow with registration, so they order replicas as seq does.
    std::map<uint64_t, uint64_t> held;  // worker -> its replica of the shard
    std::map<uint64_t, uint64_t> read_from;
    std::set<uint64_t> suspect;  // reported by two readers: until they join again
    std::map<uint64_t, std::set<uint64_t>> reported_by;  // worker -> readers that could not read from it
    std::map<uint64_t, std::set<uint64_t>> avoid;  // reader -> workers it could not read from
    std::set<uint64_t> sourceless;  // replicas whose reader's last plan found no source
    std::set<uint64_t> served;  // workers a fetch read from without its reader reporting them
    uint64_t next_replica = 1001;
    int planned = 0;
    for (int step = 0; step < 600; ++step) {
        uint64_t w = 2 + rng() % (kWorkers - 1);
        int action = rng() % 11;
        if (suspect.count(w)) action = 9;  // the server tells it to register again
        if (action < 6) {
            uint64_t rid = held.count(w) ? held[w] : (rng() % 2 ? next_replica++ : 0);
            std::vector<uint64_t> exclude;
            for (int i = rng() % 3; i > 0; --i) exclude.push_back(1 + rng() % kWorkers);
            std::vector<uint64_t> policy_exclude = exclude;
            policy_exclude.insert(policy_exclude.end(), avoid[w].begin(), avoid[w].end());
            // The policy over every holder, from the state the server reports.
            Bytes snapshot = call(status(req++));
            const StatusReply *st = env(snapshot)->body_as_StatusReply();
            std::map<uint64_t, Labels> labels;
            std::map<uint64_t, const WorkerStatus *> workers;
            for (const auto *ws : *st->workers()) {
                labels[ws->worker_id()] = get_labels(ws->labels());
                workers[ws->worker_id()] = ws;
            }
            std::vector<Candidate> all;
            for (const auto *r : *st->models()->Get(0)->versions()->Get(0)->shards()->Get(0)->replicas()) {
                if (suspect.count(r->worker_id()) || sourceless.count(r->replica_id())) continue;
                const WorkerStatus *ws = workers.at(r->worker_id());
                all.push_back({r->worker_id(), r->replica_id(), &labels[r->worker_id()], r->complete(), ws->active_reads(),
                               r->replica_id(), ws->bytes_served(), r->publisher() || r->owned()});
            }
            Request policy_req{&labels[w], w, rid, policy_exclude, {}};
            auto expected = choose_source(policy_req, all, PolicyConfig{});

            Builder b;
            auto body = CreatePlanFetch(b, b.CreateString("m"), UINT64_MAX, 0, 0, 0, rid ? put_desc(b, desc_for(ts)) : 0, rid,
                                        b.CreateVector(exclude), put_tensors(b, ts));
            Bytes r = call(finish(b, hdr(w, req++), body));
            if (!expected) {
                EXPECT_EQ(error_code(r), TH_ERR_UNAVAILABLE) << "step " << step;
            } else {
                ASSERT_EQ(env(r)->body_type(), Body::PlanReply) << "step " << step << ": " << error_text(r);
                const SourceRange *src = env(r)->body_as_PlanReply()->ranges()->Get(0);
                EXPECT_EQ(src->replica_id(), all[*expected].replica_id) << "step " << step;
                read_from[w] = src->worker_id();
                planned++;
            }
            if (rid && expected) sourceless.erase(rid);
            if (rid && !expected) sourceless.insert(rid);
            if (rid) held[w] = rid;
        } else if (action < 8 && held.count(w) && read_from.count(w)) {
            Builder b;
            std::vector<flatbuffers::Offset<SourceBytes>> from{CreateSourceBytes(b, read_from[w], 16384, 0)};
            ASSERT_EQ(error_code(call(finish(b, hdr(w, req++), CreateFetchDone(b, b.CreateString("m"), 1, 0, held[w], true,
                                                                                    b.CreateVector(from), 1000)))),
                      0);
            // The clock stands still: any report counts as made during
            // this fetch, so only a source its reader never reported serves.
            if (!avoid[w].count(read_from[w])) served.insert(read_from[w]);
        } else if (action == 8 && held.count(w)) {
            Builder b;
            ASSERT_EQ(error_code(call(finish(b, hdr(w, req++), CreateRelease(b, held[w])))), 0);
            held.erase(w);
        } else if (action == 9) {
            join(w, random_labels());  // moves: its replicas go
            held.erase(w);
            read_from.erase(w);
            suspect.erase(w);
            reported_by.erase(w);
            served.erase(w);
        } else if (action == 10 && rng() % 4 == 0) {
            uint64_t failed = 2 + rng() % (kWorkers - 1);
            Builder b;
            ASSERT_EQ(error_code(call(finish(b, hdr(w, req++), CreateSourceFailed(b, failed, b.CreateString("test"))))), 0);
            // One reader is not planned to it again; a second takes it out.
            if (failed != w) {
                avoid[w].insert(failed);
                if (!suspect.count(failed) && reported_by[failed].insert(w).second && reported_by[failed].size() >= 2 &&
                    !served.count(failed)) {
                    suspect.insert(failed);
                    reported_by.erase(failed);
                }
            }
        }
    }
    EXPECT_GT(planned, 200);
}

// A reader that found a filling replica answering but holding nothing new
// (SourceFailed.stalled) blames nobody: the replica is not routed to until
// its fill level moves or its reader plans again, and its worker stays in
// service, avoided by nobody.
TEST_F(ServiceTest, AStalledFillingReplicaIsRoutedToAgainOnceItMoves) {
    join(1, {{"host", "h1"}});
    for (uint64_t w : {2, 3, 4}) join(w, {{"host", "h2"}});  // the filling replica is nearer than the publisher
    auto ts = specs(8192);
    ASSERT_EQ(error_code(call(publish(1, req++, "m", 1, 0, 1, ts, 1000))), 0);
    EXPECT_EQ(plan_sources(call(plan(2, req++, "m", 1, 0, 2001, &ts))), std::set<uint64_t>{1});
    EXPECT_EQ(plan_sources(call(plan(3, req++, "m", 1, 0))), std::set<uint64_t>{2});
    auto stalled = [&](uint64_t reader) {
        Builder b;
        return call(finish(b, hdr(reader, req++),
                           CreateSourceFailed(b, 2, b.CreateString("held nothing new"), 2001, 0, /*stalled=*/true)));
    };
    auto progress = [&](uint32_t chunks_done) {
        Builder b;
        return call(finish(b, hdr(2, req++), CreateProgress(b, 2001, chunks_done)));
    };
    auto shown_stalled = [&] { return std::regex_search(state(), std::regex("\"replica_id\":2001,[^}]*\"stalled\":true")); };
    EXPECT_FALSE(shown_stalled()) << state();
    ASSERT_EQ(error_code(stalled(3)), 0);
    EXPECT_TRUE(shown_stalled()) << state();
    EXPECT_EQ(plan_sources(call(plan(4, req++, "m", 1, 0))), std::set<uint64_t>{1});
    EXPECT_EQ(plan_sources(call(plan(3, req++, "m", 1, 0))), std::set<uint64_t>{1});
    ASSERT_EQ(error_code(progress(1)), 0);  // it moves: routed to again, by the reader that left it too
    EXPECT_FALSE(shown_stalled()) << state();
    EXPECT_EQ(plan_sources(call(plan(3, req++, "m", 1, 0))), std::set<uint64_t>{2});
    ASSERT_EQ(error_code(stalled(4)), 0);
    ASSERT_EQ(error_code(progress(1)), 0);  // the same level: still standing
    EXPECT_EQ(plan_sources(call(plan(4, req++, "m", 1, 0))), std::set<uint64_t>{1});
    EXPECT_EQ(plan_sources(call(plan(2, req++, "m", 1, 0, 2001, &ts))), std::set<uint64_t>{1});  // its reader reads on
    EXPECT_EQ(plan_sources(call(plan(4, req++, "m", 1, 0))), std::set<uint64_t>{2});
    std::string m = svc.metrics_text();
    EXPECT_NE(m.find("tensorhub_failures_total{kind=\"source_stalled\"} 2"), std::string::npos) << m;
    EXPECT_NE(m.find("tensorhub_failures_total{kind=\"source_failed\"} 0"), std::string::npos) << m;
}

// A simulator drives the service with its own clock: leases follow it.
TEST(ServiceClock, LeasesFollowTheConfiguredClock) {
    uint64_t fake = 1000;
    ServiceConfig cfg;
    cfg.now_ms = [&] { return fake; };
    Service svc(cfg);
    auto call = [&](const Bytes &m) { return svc.handle(m.data(), m.size()); };
    ASSERT_EQ(error_code(call(hello(1, 1))), 0);
    ASSERT_EQ(error_code(call(hello(2, 1))), 0);
    fake += cfg.lease_ms;  // worker 2 is heard from later; worker 1 is not
    Builder b;
    ASSERT_EQ(error_code(call(finish(b, hdr(2, 2), CreateHeartbeat(b)))), 0);
    EXPECT_EQ(svc.expire(fake), 0u);
    EXPECT_EQ(svc.expire(fake + 1), 1u);  // worker 1's lease ran out on the fake clock
    EXPECT_EQ(svc.expire(fake + cfg.lease_ms + 1), 1u);
}

// A worker is told, at its first Hello, whom to connect to ahead of its
// first fetch: the most recent other registrant on its host and the most
// recent elsewhere, never itself, nor one gone or suspected.
TEST_F(ServiceTest, ANewWorkerIsToldWhomToConnectToAhead) {
    auto ahead = [&](uint64_t worker, const char *host) {
        Bytes r = call(hello(worker, req++, {{"host", host}}));
        EXPECT_EQ(env(r)->body_type(), Body::HelloReply);
        std::vector<uint64_t> ids;
        if (const auto *list = env(r)->body_as_HelloReply()->connect_ahead())
            for (const PeerAddress *p : *list) {
                EXPECT_EQ(std::vector<uint8_t>(p->ucx_address()->begin(), p->ucx_address()->end()),
                          (std::vector<uint8_t>{1, 2, 3, 4}));
                ids.push_back(p->worker_id());
            }
        return ids;
    };
    using Ids = std::vector<uint64_t>;
    EXPECT_EQ(ahead(1, "a"), Ids{});
    EXPECT_EQ(ahead(2, "a"), (Ids{1}));
    EXPECT_EQ(ahead(3, "b"), (Ids{2, 1}));     // nobody else on b yet: the most recent first
    EXPECT_EQ(ahead(4, "a"), (Ids{2, 1, 3}));  // same host first, then elsewhere
    Builder b;
    ASSERT_EQ(error_code(call(finish(b, hdr(2, req++), CreateGoodbye(b)))), 0);
    EXPECT_EQ(ahead(5, "a"), (Ids{4, 1, 3}));  // 2 left
    EXPECT_EQ(ahead(4, "a"), Ids{});           // registering again: it took them the first time
    ASSERT_EQ(error_code(call(source_failed(1, req++, 4))), 0);
    ASSERT_EQ(error_code(call(source_failed(5, req++, 4))), 0);
    EXPECT_EQ(ahead(6, "a"), (Ids{5, 1, 3}));  // 4 is suspected: two readers could not read from it
    // Never more than kConnectAhead: the most recent ones.
    for (uint64_t w = 7; w < 20; w++) ahead(w, "c");
    EXPECT_EQ(ahead(20, "d"), (Ids{19, 18, 17, 16, 15, 14, 13, 12}));
}

TEST_F(ServiceTest, NewcomersConnectAheadToThePublisherUpToItsFanIn) {
    auto ahead = [&](uint64_t worker) {
        Bytes r = call(hello(worker, req++, {{"host", "h" + std::to_string(worker)}}));
        std::vector<uint64_t> ids;
        if (const auto *list = env(r)->body_as_HelloReply()->connect_ahead())
            for (const PeerAddress *p : *list) ids.push_back(p->worker_id());
        return ids;
    };
    ahead(1);  // the trainer
    ASSERT_EQ(error_code(call(publish(1, req++, "m", 1, 0, 1, specs(8192), 100))), 0);
    // Long after the trainer registered, and while it is not among the
    // recent registrants, a newcomer is still offered it, first.
    for (uint64_t w = 2; w < 2 + Service::kPublisherFanIn; w++) {
        std::vector<uint64_t> ids = ahead(w);
        ASSERT_FALSE(ids.empty());
        EXPECT_EQ(ids.front(), 1u) << "newcomer " << w;
        EXPECT_LE(ids.size(), Service::kConnectAhead);
        EXPECT_EQ(std::count(ids.begin(), ids.end(), 1u), 1);
        EXPECT_EQ(ahead(w), std::vector<uint64_t>{});  // registering again is offered nothing, uses up nothing
    }
    // Past its fan-in it is offered no more: no publisher ends up with an
    // endpoint from every worker of a large job.
    std::vector<uint64_t> ids = ahead(100);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), 1u), 0);
    // Publishing again keeps the count; a copy (owned) or a re-declaration
    // does not make a publisher.
    ASSERT_EQ(error_code(call(publish(1, req++, "m", 2, 0, 1, specs(8192), 101))), 0);
    ids = ahead(101);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), 1u), 0);
    ASSERT_EQ(error_code(call(publish(3, req++, "m", 2, 0, 1, specs(8192), 102, 4096, /*again=*/true))), 0);
    Builder b;
    auto ts = specs(8192);
    ASSERT_EQ(error_code(call(finish(b, hdr(4, req++),
                                     CreatePublish(b, b.CreateString("m"), 2, 0, 1, 4096, put_tensors(b, ts),
                                                   put_desc(b, desc_for(ts)), 103, /*owned=*/true)))),
              0);
    ids = ahead(102);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), 3u), 0);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), 4u), 0);
}
