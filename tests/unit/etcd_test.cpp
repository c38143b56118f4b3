// etcd mode without etcd: the gateway's replies as etcd 3.4 writes them, the
// leader record, server_url parsing, and the service's terms. Leadership
// against a real etcd is tested by tests/system (ha_test.py).
#include <gtest/gtest.h>

#include <thread>

#include "client/follow_leader.hpp"
#include "common/error.hpp"
#include "control/etcd.hpp"
#include "messages.hpp"
#include "server/service.hpp"

using namespace th;
using namespace th::test;

namespace {

template <typename F>
std::string error_of(F f, th_status expected) {
    try {
        f();
    } catch (const Error &e) {
        EXPECT_EQ(e.code(), expected) << e.what();
        return e.what();
    }
    ADD_FAILURE() << "no error";
    return "";
}

}  // namespace

TEST(Etcd, Base64RoundTripsEveryLength) {
    std::string all;
    for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
    for (size_t n = 0; n <= all.size(); n += 1 + n / 7) {
        std::string s = all.substr(0, n);
        EXPECT_EQ(etcd::base64_decode(etcd::base64_encode(s)), s) << n;
    }
    EXPECT_EQ(etcd::base64_encode("/tensorhub/leader"), "L3RlbnNvcmh1Yi9sZWFkZXI=");
}

TEST(Etcd, BadBase64IsAProtocolError) {
    for (const char *bad : {"abc", "ab=c", "a===", "ab$d", "=abc", "ab==ab==", std::string("ab\0d", 4).c_str()})
        error_of([&] { etcd::base64_decode(bad); }, TH_ERR_PROTOCOL);
}

TEST(Etcd, EndpointsAreHostPortLists) {
    auto e = etcd::parse_endpoints("10.0.0.1:2379, http://h2:2380/ ,");
    ASSERT_EQ(e.size(), 2u);
    EXPECT_EQ(e[0], "http://10.0.0.1:2379");
    EXPECT_EQ(e[1], "http://h2:2380");
    EXPECT_NE(error_of([] { etcd::parse_endpoints(""); }, TH_ERR_INVALID_ARG).find("no etcd endpoint"), std::string::npos);
    error_of([] { etcd::parse_endpoints("hostonly"); }, TH_ERR_INVALID_ARG);
    error_of([] { etcd::parse_endpoints("h:1/path"); }, TH_ERR_INVALID_ARG);
    EXPECT_NE(error_of([] { etcd::parse_endpoints("https://h:2379"); }, TH_ERR_INVALID_ARG).find("https"),
              std::string::npos);
}

TEST(Etcd, RepliesAsTheGatewayWritesThem) {
    // Recorded from etcd 3.4's gateway: 64-bit integers are strings, zeros and
    // false are left out.
    auto kv = etcd::parse_range_reply(
        R"({"header":{"cluster_id":"14841639068965178418","revision":"7"},"kvs":[{"key":"L3RoL2xlYWRlcg==",)"
        R"("create_revision":"6","mod_revision":"6","version":"1","value":"eyJ1cmwiOiJ0Y3A6Ly9oOjEifQ==",)"
        R"("lease":"7587870385617419012"}],"count":"1"})");
    ASSERT_TRUE(kv);
    EXPECT_EQ(kv->value, R"({"url":"tcp://h:1"})");
    EXPECT_EQ(kv->mod_revision, 6);
    EXPECT_EQ(kv->lease, 7587870385617419012);
    EXPECT_FALSE(etcd::parse_range_reply(R"({"header":{"revision":"7"}})"));
    EXPECT_TRUE(etcd::parse_txn_reply(R"({"header":{},"succeeded":true,"responses":[]})"));
    EXPECT_FALSE(etcd::parse_txn_reply(R"({"header":{},"responses":[]})"));
    EXPECT_EQ(etcd::parse_grant_reply(R"({"header":{},"ID":"7587870385617419012","TTL":"3"})"), 7587870385617419012);
    EXPECT_EQ(etcd::parse_keep_alive_reply(R"({"result":{"header":{},"ID":"5","TTL":"3"}})"
                                           "\n"),
              3);
    EXPECT_EQ(etcd::parse_keep_alive_reply(R"({"result":{"header":{},"ID":"5"}})"), 0);  // the lease is gone
}

TEST(Etcd, MalformedRepliesAreProtocolErrors) {
    for (const char *bad : {"", "[]", "not json", R"({"kvs":5})", R"({"kvs":[7]})", R"({"kvs":[{"value":3}]})",
                            R"({"kvs":[{"value":"@@@@"}]})", R"({"kvs":[{"mod_revision":"12x"}]})"})
        error_of([&] { etcd::parse_range_reply(bad); }, TH_ERR_PROTOCOL);
    EXPECT_NE(error_of([] { etcd::parse_txn_reply(R"({"error":"etcdserver: too many operations","code":3,)"
                                                  R"("message":"etcdserver: too many operations"})"); },
                       TH_ERR_PROTOCOL)
                  .find("too many operations"),
              std::string::npos);
    error_of([] { etcd::parse_txn_reply(R"({"succeeded":"yes"})"); }, TH_ERR_PROTOCOL);
    error_of([] { etcd::parse_grant_reply(R"({"TTL":"3"})"); }, TH_ERR_PROTOCOL);
    error_of([] { etcd::parse_keep_alive_reply(R"({"ID":"5"})"); }, TH_ERR_PROTOCOL);
}

TEST(Etcd, LeaderRecords) {
    LeaderRecord r{"tcp://10.0.0.2:7070", 42};
    EXPECT_EQ(etcd::parse_leader_record(etcd::leader_record_json(r)), r);
    for (const char *bad : {"{}", R"({"url":"tcp://h:1"})", R"({"url":"","epoch":1})", R"({"url":"u","epoch":-1})",
                            R"({"url":7,"epoch":1})", "tcp://h:1"})
        error_of([&] { etcd::parse_leader_record(bad); }, TH_ERR_PROTOCOL);
}

TEST(Etcd, ServerUrlsNameEtcdAndAPrefix) {
    EXPECT_TRUE(FollowLeader::is_etcd_url("etcd://h:2379/x"));
    EXPECT_FALSE(FollowLeader::is_etcd_url("tcp://h:7070"));
    EXPECT_EQ(FollowLeader("etcd://h:2379,h2:2379/jobs/a/", 1000).prefix(), "/jobs/a");
    EXPECT_EQ(FollowLeader("etcd://h:2379", 1000).prefix(), TH_DEFAULT_ETCD_PREFIX);
    for (const char *url : {"etcd:///tensorhub", "etcd://"})
        EXPECT_NE(error_of([&] { FollowLeader(url, 1000); }, TH_ERR_INVALID_ARG).find(str("'", url, "' names no etcd")),
                  std::string::npos);
    error_of([] { FollowLeader("etcd://nohost/tensorhub", 1000); }, TH_ERR_INVALID_ARG);
}

TEST(Etcd, NoEtcdMeansAClearErrorAtTheDeadline) {
    FollowLeader f("etcd://127.0.0.1:1/tensorhub", 400);
    auto t0 = Clock::now();
    std::string why = error_of([&] { f.next({}, false, Deadline(300)); }, TH_ERR_UNAVAILABLE);
    EXPECT_NE(why.find("no tensorhub server leads under /tensorhub"), std::string::npos) << why;
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
}

// A server in etcd mode answers only during its terms, and each term starts
// afresh: what it knew in an earlier one is gone, and its epoch fences it.
TEST(Etcd, TheServiceAnswersOnlyWhileItLeads) {
    ServiceConfig cfg;
    cfg.await_leadership = true;
    Service svc(cfg);
    auto call = [&](const Bytes &m) { return svc.handle(m.data(), m.size()); };
    Bytes r = call(hello(1, 1));
    EXPECT_EQ(error_code(r), TH_ERR_UNAVAILABLE);
    EXPECT_TRUE(env(r)->body_as_ErrorReply()->not_leader());

    uint64_t first = svc.epoch() + 5;
    svc.lead(first, now_ms() + 60000, false);
    EXPECT_TRUE(svc.leading());
    ASSERT_EQ(error_code(call(hello(1, 2))), 0);
    ASSERT_EQ(error_code(call(publish(1, 3, "m", 1, 0, 1, specs(4096), 100))), 0);
    EXPECT_EQ(env(call(hello(2, 1)))->epoch(), first);

    svc.step_down();
    EXPECT_FALSE(svc.leading());
    EXPECT_TRUE(env(call(heartbeat(1, 4)))->body_as_ErrorReply()->not_leader());

    // A term that ran out answers no more, without a step_down().
    svc.lead(first + 1, now_ms() + 50, true);
    EXPECT_EQ(error_code(call(hello(1, 5))), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(80));
    EXPECT_TRUE(env(call(heartbeat(1, 6)))->body_as_ErrorReply()->not_leader());

    svc.lead(first + 2, now_ms() + 60000, true);
    EXPECT_EQ(env(call(hello(3, 1)))->epoch(), first + 2);
    Bytes unknown = call(heartbeat(1, 7));  // forgotten with the earlier term
    EXPECT_TRUE(env(unknown)->body_as_ErrorReply()->unknown_worker());
}
