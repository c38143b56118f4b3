// Bad input gets a clear error and changes nothing; a missing or restarted
// server is reported or recovered from. In one process, public API only.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>


#include "harness.hpp"

namespace {

using namespace th_test;

class Errors : public ::testing::Test {
  protected:
    void SetUp() override {
        server = start_server();
        url = th_server_url(server);
        pub = connect(url, "pub");
        reader = connect(url, "reader");
        ASSERT_EQ(publish(pub, "m", 1, 0, 1, src, &rep), TH_OK) << th_last_error();
    }
    void TearDown() override {
        th_replica_release(rep);
        th_client_destroy(reader);
        th_client_destroy(pub);
        th_server_destroy(server);
    }
    th_server *server = nullptr;
    std::string url;
    th_client *pub = nullptr, *reader = nullptr;
    Shard src{3, 256 << 10, 1};
    th_replica *rep = nullptr;
};

}  // namespace

TEST_F(Errors, HappyPathWholeShardAndSingleTensorRange) {
    Shard dst(3, 256 << 10);
    uint64_t got = 0;
    ASSERT_EQ(fetch(reader, "m", TH_LATEST, 0, dst, &got), TH_OK) << th_last_error();
    EXPECT_EQ(got, 1u);
    EXPECT_EQ(dst.data, src.data);

    std::vector<uint8_t> part(5000);
    th_tensor t{};
    t.name = "slice";
    t.dtype = TH_DTYPE_UINT8;
    t.ndim = 1;
    t.shape[0] = 5000;
    t.data = part.data();
    t.nbytes = part.size();
    th_fetch_config fc;
    th_fetch_config_init(&fc, sizeof fc);
    fc.model = "m";
    fc.tensor = "w1";
    fc.offset = 100001;  // odd, crosses a chunk boundary (64 KiB chunks)
    fc.length = 5000;
    ASSERT_EQ(th_fetch(reader, &fc, &t, 1, &got, nullptr), TH_OK) << th_last_error();
    EXPECT_EQ(0, std::memcmp(part.data(), src.data[1].data() + 100001, 5000));
    // A single-tensor fetch cannot serve.
    th_replica *r = nullptr;
    EXPECT_ERROR(th_fetch(reader, &fc, &t, 1, &got, &r), TH_ERR_INVALID_ARG, "whole-shard");
    fc.tensor = "nope";
    EXPECT_ERROR(th_fetch(reader, &fc, &t, 1, &got, nullptr), TH_ERR_NOT_FOUND, "'nope'");
    fc.tensor = "w1";
    fc.offset = (256 << 10) - 10;
    EXPECT_ERROR(th_fetch(reader, &fc, &t, 1, &got, nullptr), TH_ERR_INVALID_ARG, "outside tensor 'w1'");
}

TEST_F(Errors, UnknownModelVersionAndShard) {
    Shard dst(3, 256 << 10);
    EXPECT_ERROR(fetch(reader, "nope", TH_LATEST, 0, dst), TH_ERR_NOT_FOUND, "model 'nope'");
    EXPECT_ERROR(fetch(reader, "m", 7, 0, dst), TH_ERR_NOT_FOUND, "no version 7");
    EXPECT_ERROR(fetch(reader, "m", 1, 5, dst), TH_ERR_INVALID_ARG, "shard 5 is out of range");
    uint64_t v = 0;
    EXPECT_ERROR(th_resolve(reader, "nope", TH_LATEST, &v), TH_ERR_NOT_FOUND, "'nope'");
}

TEST_F(Errors, NotCommittedUntilEveryShardIsPublished) {
    Shard half(2, 64 << 10, 1);
    th_replica *r0 = nullptr, *r1 = nullptr;
    ASSERT_EQ(publish(pub, "tp", 1, 0, 2, half, &r0), TH_OK) << th_last_error();
    Shard dst(2, 64 << 10);
    EXPECT_ERROR(fetch(reader, "tp", 1, 0, dst), TH_ERR_NOT_COMMITTED, "1 of 2 shards");
    EXPECT_ERROR(fetch(reader, "tp", TH_LATEST, 0, dst), TH_ERR_NOT_FOUND, "no committed version");
    Shard other(2, 64 << 10, 1, 1);
    ASSERT_EQ(publish(pub, "tp", 1, 1, 2, other, &r1), TH_OK) << th_last_error();
    EXPECT_EQ(fetch(reader, "tp", TH_LATEST, 1, dst), TH_OK) << th_last_error();
    EXPECT_EQ(dst.data, other.data);
    th_replica_release(r0);
    th_replica_release(r1);
}

TEST_F(Errors, LayoutMismatchNamesTheTensor) {
    Shard small(3, 128 << 10);
    EXPECT_ERROR(fetch(reader, "m", 1, 0, small), TH_ERR_LAYOUT_MISMATCH, "'w0' has 262144 bytes, 131072 given");
    Shard fewer(2, 256 << 10);
    EXPECT_ERROR(fetch(reader, "m", 1, 0, fewer), TH_ERR_LAYOUT_MISMATCH, "3 tensors, 2 given");
    Shard renamed(3, 256 << 10);
    renamed.views[2].name = "other";
    EXPECT_ERROR(fetch(reader, "m", 1, 0, renamed), TH_ERR_LAYOUT_MISMATCH, "'other' given");
    Shard retyped(3, 256 << 10);
    retyped.views[1].dtype = TH_DTYPE_FLOAT16;
    EXPECT_ERROR(fetch(reader, "m", 1, 0, retyped), TH_ERR_LAYOUT_MISMATCH, "float16 given");
}

TEST_F(Errors, NullOrInconsistentBuffers) {
    Shard dst(3, 256 << 10);
    dst.views[1].data = nullptr;
    EXPECT_ERROR(fetch(reader, "m", 1, 0, dst), TH_ERR_INVALID_ARG, "'w1' has a null data pointer");
    Shard bad(1, 1024, 2);
    bad.views[0].nbytes = 1000;  // does not match bfloat16 x 512
    th_replica *r = nullptr;
    EXPECT_ERROR(publish(pub, "m", 2, 0, 1, bad, &r), TH_ERR_INVALID_ARG, "'w0': nbytes 1000");
    bad.views[0].nbytes = 1024;
    bad.views[0].data = nullptr;
    EXPECT_ERROR(publish(pub, "m", 2, 0, 1, bad, &r), TH_ERR_INVALID_ARG, "null data pointer");
    EXPECT_EQ(r, nullptr);
}

TEST_F(Errors, ConflictingPublishIsRejected) {
    Shard other(2, 256 << 10, 1);
    th_replica *r = nullptr;
    EXPECT_ERROR(publish(reader, "m", 1, 0, 1, other, &r), TH_ERR_CONFLICT, "another layout");
    EXPECT_ERROR(publish(reader, "m", 1, 0, 2, src, &r), TH_ERR_CONFLICT, "has 1 shards");
    EXPECT_EQ(r, nullptr);
    // Nothing changed: the original still serves.
    Shard dst(3, 256 << 10);
    EXPECT_EQ(fetch(reader, "m", 1, 0, dst), TH_OK) << th_last_error();
}

TEST_F(Errors, ALastHolderThatLeavesMakesTheVersionUnavailableAtOnce) {
    // A client that shuts down takes its replicas with it (nothing to spill
    // into): readers get a clear error at once, not a wait.
    th_replica_release(rep);  // spilled: the version is required, so it stays readable
    rep = nullptr;
    Shard dst(3, 256 << 10);
    ASSERT_EQ(fetch(reader, "m", 1, 0, dst), TH_OK) << th_last_error();
    th_client_destroy(pub);
    pub = nullptr;
    th_client *third = connect(url, "third");
    Shard other(3, 256 << 10);
    // The reader above fetched without serving, so no holder is left.
    auto t0 = Clock::now();
    EXPECT_ERROR(fetch(third, "m", 1, 0, other), TH_ERR_UNAVAILABLE, "no live holder of model 'm' version 1 shard 0");
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
    th_client_destroy(third);
}

TEST_F(Errors, RegistrationIsReusedAcrossVersions) {
    // Publishing v2 from the same buffers works and readers get v2's bytes.
    th_support::fill_pattern(src.data[0].data(), src.data[0].size(), 12345);
    th_replica *r2 = nullptr;
    ASSERT_EQ(publish(pub, "m", 2, 0, 1, src, &r2), TH_OK) << th_last_error();
    th_replica_release(rep);
    rep = r2;
    Shard dst(3, 256 << 10);
    uint64_t got = 0;
    ASSERT_EQ(fetch(reader, "m", TH_LATEST, 0, dst, &got), TH_OK) << th_last_error();
    EXPECT_EQ(got, 2u);
    EXPECT_EQ(dst.data, src.data);
}

// A client connects ahead to the workers the server suggests as it registers;
// one that leaves at once leaves their endpoints to it half connected. UCX
// before 1.14 aborts the process of a worker whose reply to such a connection
// is still queued when the connection fails (the sanitizer stage runs this
// test with Debian's 1.13): clients that go leave politely (worker.cpp,
// flush_endpoints), and the others stay up and keep serving.
TEST_F(Errors, ClientsThatLeaveRightAfterRegisteringLeaveTheOthersServing) {
    for (int i = 0; i < 100; ++i) th_client_destroy(connect(url, "passer-by"));
    Shard dst(3, 256 << 10);
    ASSERT_EQ(fetch(reader, "m", TH_LATEST, 0, dst), TH_OK) << th_last_error();
    EXPECT_EQ(dst.data, src.data);
}

// Nothing listens on port 1: the message says the connection is refused.
TEST(ServerErrors, UnreachableServerFailsWithinTheDeadline) {
    th_client_config cc;
    th_client_config_init(&cc, sizeof cc);
    cc.server_url = "tcp://127.0.0.1:1";
    cc.timeout_ms = 300;
    th_client *c = nullptr;
    auto t0 = Clock::now();
    EXPECT_ERROR(th_client_create(&c, &cc), TH_ERR_UNAVAILABLE,
                 "cannot reach the tensorhub server at tcp://127.0.0.1:1: Connection refused");
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
    char *json = nullptr;
    EXPECT_ERROR(th_server_status_json("tcp://127.0.0.1:1", 300, &json), TH_ERR_UNAVAILABLE,
                 "cannot reach the tensorhub server at tcp://127.0.0.1:1: Connection refused");
}

// A port that accepts connections but never speaks the protocol (here: a
// socket that listens and never accepts) is not a refused one.
TEST(ServerErrors, AnAddressThatNeverAnswersIsNotReportedAsRefused) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr *>(&addr), len), 0);
    ASSERT_EQ(listen(fd, 16), 0);
    ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len), 0);
    std::string url = "tcp://127.0.0.1:";
    url += std::to_string(ntohs(addr.sin_port));
    th_client_config cc;
    th_client_config_init(&cc, sizeof cc);
    cc.server_url = url.c_str();
    cc.timeout_ms = 300;
    th_client *c = nullptr;
    EXPECT_ERROR(th_client_create(&c, &cc), TH_ERR_UNAVAILABLE,
                 "cannot reach the tensorhub server at " + url + " (no connection in time)");
    close(fd);
}

TEST(ServerErrors, ServerRestartedUnderTheClients) {
    th_server *a = start_server();
    std::string url = th_server_url(a);
    th_client *pub = connect(url, "pub", 2000);
    th_client *reader = connect(url, "reader", 2000);
    Shard src(2, 128 << 10, 4);
    th_replica *rep = nullptr;
    ASSERT_EQ(publish(pub, "m", 4, 0, 1, src, &rep), TH_OK) << th_last_error();
    th_server_destroy(a);

    // While no server is up, calls fail within their deadline.
    Shard dst(2, 128 << 10);
    auto t0 = Clock::now();
    EXPECT_NE(fetch(reader, "m", TH_LATEST, 0, dst, nullptr, nullptr, 1000), TH_OK);
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(3));

    // A new server on the same address learns the version back from the
    // publisher, which registers again on its next heartbeat.
    th_server *b = start_server(url.c_str());
    ASSERT_NE(b, nullptr);
    uint64_t got = 0;
    th_status st = TH_ERR_UNAVAILABLE;
    for (auto end = Clock::now() + std::chrono::seconds(10); Clock::now() < end;) {
        st = fetch(reader, "m", TH_LATEST, 0, dst, &got);
        if (st == TH_OK) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_EQ(st, TH_OK) << th_last_error();
    EXPECT_EQ(got, 4u);
    EXPECT_EQ(dst.data, src.data);
    th_replica_release(rep);
    th_client_destroy(reader);
    th_client_destroy(pub);
    th_server_destroy(b);
}

TEST(ServerErrors, ShutdownWithEveryServerGoneTriesNoFailover) {
    // A worker leaving while no server of its list answers withdraws what it
    // holds after one unanswered call, not one failover round per replica:
    // destroying it takes at most a call's attempt, the goodbye and the
    // heartbeat in flight, well within two call timeouts.
    th_server *a = start_server(), *b = start_server();
    std::string both = std::string(th_server_url(a)) + "," + th_server_url(b);
    const uint32_t timeout_ms = 6000;
    th_client *c = connect(both, "leaving", timeout_ms);
    std::vector<th_replica *> held(3);
    std::vector<Shard> shards;
    shards.reserve(held.size());
    for (uint32_t v = 0; v < held.size(); ++v) {
        shards.emplace_back(1, 64 << 10, v);
        ASSERT_EQ(publish(c, "m", v + 1, 0, 1, shards.back(), &held[v]), TH_OK) << th_last_error();
    }
    th_server_destroy(a);
    th_server_destroy(b);
    auto t0 = Clock::now();
    th_client_destroy(c);
    EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(2 * timeout_ms));
    for (th_replica *r : held) EXPECT_EQ(th_replica_release(r), TH_OK);
}

TEST(ServerErrors, ClientDestroyedBeforeItsReplicaHandles) {
    // Destroying a client withdraws what it holds; the handles stay valid only
    // to be released afterwards.
    th_server *s = start_server();
    th_client *c = connect(th_server_url(s), "short-lived");
    Shard w(2, 64 << 10, 1);
    th_replica *r = nullptr;
    ASSERT_EQ(publish(c, "m", 1, 0, 1, w, &r), TH_OK) << th_last_error();
    th_client_destroy(c);
    EXPECT_EQ(th_replica_release(r), TH_OK);
    th_server_destroy(s);
}

TEST(ServerErrors, ReleasingWhileTheServerIsGoneWithdrawsLocallyAndReportsIt) {
    th_server *s = start_server();
    th_client *c = connect(th_server_url(s), "orphan", 500);
    Shard w(1, 64 << 10, 1);
    th_replica *r = nullptr;
    ASSERT_EQ(publish(c, "m", 1, 0, 1, w, &r), TH_OK) << th_last_error();
    th_server_destroy(s);
    // The server cannot be told: the error says so, and the handle is gone.
    EXPECT_NE(th_replica_release(r), TH_OK);
    EXPECT_NE(std::string(th_last_error()).find("server"), std::string::npos) << th_last_error();
    th_client_destroy(c);  // must not touch the released replica
}
