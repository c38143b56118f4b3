// th_cancel: a fetch given a signalled token ends with TH_ERR_CANCELED,
// whether it was signalled before, between transfers or from another thread
// while the only holder is stuck (a worker process); it leaves no replica
// behind and the buffers can be fetched into again. Public API only.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "harness.hpp"
#include "scoped_env.hpp"

using namespace th_test;

namespace {

struct Token {
    th_cancel *c = nullptr;
    Token() { EXPECT_EQ(th_cancel_create(&c), TH_OK) << th_last_error(); }
    ~Token() { th_cancel_destroy(c); }
};

th_fetch_config config(th_cancel *cancel, uint32_t timeout_ms = 30000) {
    th_fetch_config fc;
    th_fetch_config_init(&fc, sizeof fc);
    fc.model = "m";
    fc.cancel = cancel;
    fc.timeout_ms = timeout_ms;
    return fc;
}

// Replicas of (model "m", version 1) the server lists for worker.
size_t replicas_of(const std::string &url, uint64_t worker) {
    nlohmann::json v = version_status(server_status(url), "m", 1);
    size_t n = 0;
    for (const auto &shard : v["shards"])
        for (const auto &r : shard["replicas"])
            if (r["worker_id"].get<uint64_t>() == worker) ++n;
    return n;
}

}  // namespace

TEST(Cancel, TheTokenSaysWhetherItWasSignalled) {
    Token t;
    EXPECT_EQ(th_cancel_signalled(t.c), 0);
    th_cancel_signal(t.c);
    th_cancel_signal(t.c);  // idempotent
    EXPECT_EQ(th_cancel_signalled(t.c), 1);
    EXPECT_EQ(th_cancel_signalled(nullptr), 0);
    th_cancel_signal(nullptr);
    th_cancel_destroy(nullptr);
    EXPECT_EQ(th_cancel_create(nullptr), TH_ERR_INVALID_ARG);
    EXPECT_STREQ(th_status_str(TH_ERR_CANCELED), "canceled");
}

// A linked token: signalled with its parent, alone without it; either may
// be destroyed first.
TEST(Cancel, ALinkedTokenEndsWithItsParentButNotItsParentWithIt) {
    Token parent;
    th_cancel *one = nullptr, *two = nullptr, *grandchild = nullptr, *plain = nullptr;
    ASSERT_EQ(th_cancel_create_linked(parent.c, &one), TH_OK) << th_last_error();
    ASSERT_EQ(th_cancel_create_linked(parent.c, &two), TH_OK) << th_last_error();
    ASSERT_EQ(th_cancel_create_linked(two, &grandchild), TH_OK) << th_last_error();
    ASSERT_EQ(th_cancel_create_linked(nullptr, &plain), TH_OK) << th_last_error();
    EXPECT_EQ(th_cancel_create_linked(parent.c, nullptr), TH_ERR_INVALID_ARG);

    th_cancel_signal(one);  // one operation among several ends
    EXPECT_EQ(th_cancel_signalled(one), 1);
    EXPECT_EQ(th_cancel_signalled(parent.c), 0);
    EXPECT_EQ(th_cancel_signalled(two), 0);
    EXPECT_EQ(th_cancel_signalled(grandchild), 0);

    th_cancel_destroy(two);  // the grandchild still hears its grandparent
    th_cancel_signal(parent.c);  // they all end
    EXPECT_EQ(th_cancel_signalled(grandchild), 1);
    EXPECT_EQ(th_cancel_signalled(plain), 0);
    for (th_cancel *t : {grandchild, one, plain}) th_cancel_destroy(t);

    // Either may go first: a child outlives its parent (signalled or not).
    th_cancel *p = nullptr, *signalled_child = nullptr, *quiet_child = nullptr, *quiet_parent = nullptr;
    ASSERT_EQ(th_cancel_create(&p), TH_OK);
    ASSERT_EQ(th_cancel_create_linked(p, &signalled_child), TH_OK);
    ASSERT_EQ(th_cancel_create(&quiet_parent), TH_OK);
    ASSERT_EQ(th_cancel_create_linked(quiet_parent, &quiet_child), TH_OK);
    th_cancel_signal(p);
    th_cancel_destroy(p);
    th_cancel_destroy(quiet_parent);
    EXPECT_EQ(th_cancel_signalled(signalled_child), 1);
    EXPECT_EQ(th_cancel_signalled(quiet_child), 0);
    th_cancel_signal(quiet_child);
    EXPECT_EQ(th_cancel_signalled(quiet_child), 1);
    th_cancel_destroy(signalled_child);
    th_cancel_destroy(quiet_child);
}

TEST(Cancel, ATokenSignalledBeforeTheFetchEndsItBeforeItsFirstRead) {
    ServerGuard server;
    const std::string &url = server.url;
    th_client *pub = connect(url, "pub"), *reader = connect(url, "reader");
    Shard w(2, 64 << 10, 1), r(2, 64 << 10);
    th_replica *pr = nullptr;
    ASSERT_EQ(publish(pub, "m", 1, 0, 1, w, &pr), TH_OK) << th_last_error();

    Token t;
    th_cancel_signal(t.c);
    th_fetch_config fc = config(t.c);
    th_replica *rr = nullptr;
    EXPECT_EQ(th_fetch(reader, &fc, r.views.data(), r.views.size(), nullptr, &rr), TH_ERR_CANCELED);
    EXPECT_NE(std::string(th_last_error()).find("canceled before its first read"), std::string::npos) << th_last_error();
    EXPECT_EQ(rr, nullptr);
    EXPECT_EQ(replicas_of(url, th_client_worker_id(reader)), 0u);

    // A token linked to a signalled one ends it as well.
    th_cancel *child = nullptr;
    ASSERT_EQ(th_cancel_create_linked(t.c, &child), TH_OK) << th_last_error();
    fc.cancel = child;
    EXPECT_EQ(th_fetch(reader, &fc, r.views.data(), r.views.size(), nullptr, &rr), TH_ERR_CANCELED);
    EXPECT_EQ(rr, nullptr);
    th_cancel_destroy(child);

    // The same buffers, without the token: the version whole.
    fc.cancel = nullptr;
    ASSERT_EQ(th_fetch(reader, &fc, r.views.data(), r.views.size(), nullptr, nullptr), TH_OK) << th_last_error();
    EXPECT_EQ(r.first_wrong(1, 0), -1) << "the fetch after a canceled one delivers the version";
    th_replica_release(pr);
    th_client_destroy(reader);
    th_client_destroy(pub);
}

namespace {

struct CancelAt {
    th_cancel *cancel;
    uint64_t at_bytes;  // signals once this many bytes arrived
    uint64_t seen = 0;
};

void cancel_midway(uint64_t done, uint64_t, void *user_data) {
    auto *c = static_cast<CancelAt *>(user_data);
    c->seen = done;
    if (done >= c->at_bytes) th_cancel_signal(c->cancel);
}

}  // namespace

TEST(Cancel, AFetchCanceledBetweenTransfersEndsThereAndLeavesNoReplica) {
    // One chunk a read, 1 ms apart: the first progress call comes before the
    // last chunk (on shared memory one read could otherwise take the whole
    // shard). Fault hooks are read once per process: ctest runs each test in
    // a process of its own.
    setenv("TENSORHUB_FAULT_CHUNK_DELAY_US", "1000", 1);
    ServerGuard server;
    const std::string &url = server.url;
    th_client *pub = connect(url, "pub"), *reader = connect(url, "reader");
    const uint64_t chunk = 64 << 10, total = 4 * (1 << 20);
    Shard w(4, 1 << 20, 1), r(4, 1 << 20);
    th_publish_config pc;
    th_publish_config_init(&pc, sizeof pc);
    pc.model = "m";
    pc.version = 1;
    pc.chunk_bytes = chunk;
    th_replica *pr = nullptr;
    ASSERT_EQ(th_publish(pub, &pc, w.views.data(), w.views.size(), &pr), TH_OK) << th_last_error();

    Token t;
    CancelAt at{t.c, chunk};
    th_fetch_config fc = config(t.c);
    fc.progress = cancel_midway;
    fc.progress_user_data = &at;
    fc.progress_interval_ms = 0;
    fc.stats = nullptr;
    th_replica *rr = nullptr;
    th_status st = th_fetch(reader, &fc, r.views.data(), r.views.size(), nullptr, &rr);
    if (st == TH_OK && at.seen == total) {
        th_replica_release(rr);
        th_replica_release(pr);
        th_client_destroy(reader);
        th_client_destroy(pub);
        GTEST_SKIP() << "every byte arrived before the first progress call: this process read its fault hooks "
                        "before the test set them (run the test alone, as ctest does)";
    }
    // The callback runs between transfers; the fetch looks at the token before
    // the next one, so it cannot have run to the end.
    ASSERT_EQ(st, TH_ERR_CANCELED) << th_last_error() << " (canceled after " << at.seen << " bytes)";
    EXPECT_LT(at.seen, total);
    std::string why = th_last_error();
    EXPECT_NE(why.find("canceled with "), std::string::npos) << why;
    EXPECT_NE(why.find(" of 64 chunks fetched"), std::string::npos) << why;
    EXPECT_EQ(rr, nullptr);
    // The reader registered itself as a filling replica when it planned: the
    // end of the fetch took it back.
    EXPECT_EQ(replicas_of(url, th_client_worker_id(reader)), 0u);

    fc.cancel = nullptr;
    fc.progress = nullptr;
    ASSERT_EQ(th_fetch(reader, &fc, r.views.data(), r.views.size(), nullptr, &rr), TH_OK) << th_last_error();
    EXPECT_EQ(r.first_wrong(1, 0), -1);
    th_replica_release(rr);
    th_replica_release(pr);
    th_client_destroy(reader);
    th_client_destroy(pub);
}

namespace {

// Stops the holder once the first bytes arrived, with reads in flight, and
// has another thread signal the token a moment later.
struct StopThenCancel {
    pid_t holder;
    th_cancel *cancel;
    std::thread signaller;
    uint64_t stopped_at = 0;
};

void stop_then_cancel(uint64_t done, uint64_t total, void *user_data) {
    auto *s = static_cast<StopThenCancel *>(user_data);
    if (s->stopped_at != 0 || done == 0 || done == total) return;
    s->stopped_at = done;
    kill(s->holder, SIGSTOP);
    s->signaller = std::thread([c = s->cancel] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        th_cancel_signal(c);
    });
}

}  // namespace

TEST(Cancel, ASignalFromAnotherThreadEndsAFetchWhoseOnlyHolderStoppedMidway) {
    // Over tcp a holder's CPU answers every read: stopped, it answers none,
    // and without the token the fetch would wait out its chunk timeout, and
    // then as long again for the reads in flight.
    th_support::ScopedEnv tcp_only("UCX_TLS", "tcp");  // for the reader this process makes
    // One chunk a read, 1 ms apart: the first progress call comes early, with
    // reads still in flight (see AFetchCanceledBetweenTransfers...).
    setenv("TENSORHUB_FAULT_CHUNK_DELAY_US", "1000", 1);
    ServerGuard server;
    const std::string &url = server.url;
    Process holder(worker({"publish", "--server", url, "--name", "holder", "--model", "m", "--shard-kb", "65536",
                           "--chunk-kb", "256"},
                          {"UCX_TLS=tcp"}));
    std::string l = holder.line(30000);
    ASSERT_EQ(l.rfind("ready", 0), 0u) << l;

    th_client_config cc;
    th_client_config_init(&cc, sizeof cc);
    cc.server_url = url.c_str();
    cc.worker_name = "reader";
    cc.chunk_timeout_ms = 30000;
    th_client *reader = nullptr;
    ASSERT_EQ(th_client_create(&reader, &cc), TH_OK) << th_last_error();
    Shard r(4, 16 << 20);

    Token t;
    StopThenCancel stc{holder.pid(), t.c, {}};
    th_fetch_config fc = config(t.c, 60000);
    fc.progress = stop_then_cancel;
    fc.progress_user_data = &stc;
    fc.progress_interval_ms = 0;
    auto start = std::chrono::steady_clock::now();
    th_status st = th_fetch(reader, &fc, r.views.data(), r.views.size(), nullptr, nullptr);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (stc.signaller.joinable()) stc.signaller.join();
    kill(holder.pid(), SIGCONT);
    if (stc.stopped_at == 0) {
        th_client_destroy(reader);
        GTEST_SKIP() << "every byte arrived before the first progress call: this process read its fault hooks "
                        "before the test set them (run the test alone, as ctest does)";
    }
    EXPECT_EQ(st, TH_ERR_CANCELED) << th_last_error();
    // Not a timing claim: the chunk timeout is 30 s and the deadline 60 s;
    // what ends the fetch well before either is the token.
    EXPECT_LT(seconds, 15) << "the fetch waited for its stuck reads instead of closing them";
    th_client_destroy(reader);
}

TEST(Cancel, AWaitForAVersionEndsWhenItsTokenIsSignalled) {
    ServerGuard server;
    th_client *reader = connect(server.url, "reader");
    Token t;
    std::thread signaller([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        th_cancel_signal(t.c);
    });
    uint64_t got = 0;
    auto start = std::chrono::steady_clock::now();
    th_status st = th_wait_for_version_cancelable(reader, "m", 0, 60000, t.c, &got);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    signaller.join();
    EXPECT_EQ(st, TH_ERR_CANCELED) << th_last_error();
    EXPECT_NE(std::string(th_last_error()).find("canceled while waiting for a version of model 'm' newer than 0"),
              std::string::npos)
        << th_last_error();
    EXPECT_LT(seconds, 30) << "the wait ran to its 60 s timeout";  // not a timing claim: the token ended it

    // Without a token it is th_wait_for_version, and a version ends it.
    th_client *pub = connect(server.url, "pub");
    Shard w(1, 4096, 1);
    th_replica *pr = nullptr;
    ASSERT_EQ(publish(pub, "m", 1, 0, 1, w, &pr), TH_OK) << th_last_error();
    EXPECT_EQ(th_wait_for_version_cancelable(reader, "m", 0, 10000, nullptr, &got), TH_OK) << th_last_error();
    EXPECT_EQ(got, 1u);
    th_replica_release(pr);
    th_client_destroy(pub);
    th_client_destroy(reader);
}
