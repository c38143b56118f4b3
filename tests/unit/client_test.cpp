// Internals of the client that the public API does not show.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "buffers.hpp"
#include "scoped_env.hpp"
#include "client/client.hpp"
#include "client/source_wait.hpp"
#include "common/faults.hpp"
#include "server/server.hpp"
#include "transport/ucx_env.hpp"
#include "transport/worker.hpp"

using namespace th;

namespace {

// Waits (up to 10 s) until pred() holds.
template <typename Pred>
bool within_10s(Pred pred) {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!pred()) {
        if (std::chrono::steady_clock::now() > until) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
}

}  // namespace

TEST(Client, PublishingALaterVersionFromTheSameBuffersRegistersNothingNew) {
    Server server("tcp://127.0.0.1:0", ServiceConfig{});
    ClientConfig cfg;
    cfg.server_url = server.url();
    cfg.retention = TH_RETAIN_FAIL;  // no spill pool: its slabs are registrations of their own
    Client client(cfg);
    std::vector<uint8_t> a(1 << 20), b(1 << 16);
    auto buffers = [&] {
        return std::vector<Buffer>{{{"a", TH_DTYPE_UINT8, {1 << 20}, 1 << 20}, a.data(), TH_MEM_HOST},
                                   {{"b", TH_DTYPE_UINT8, {1 << 16}, 1 << 16}, b.data(), TH_MEM_HOST}};
    };
    auto v1 = client.publish("m", 1, 0, 1, 64 << 10, buffers());
    size_t after_first = client.ucx().registrations();
    auto v2 = client.publish("m", 2, 0, 1, 64 << 10, buffers());
    client.release(*v1, /*retain=*/false);
    auto v3 = client.publish("m", 3, 0, 1, 64 << 10, buffers());
    EXPECT_EQ(client.ucx().registrations(), after_first);
    client.release(*v2, false);
    client.release(*v3, false);
}

// A trainer's loop: publish, mutate (the last copy of the newest version is
// spilled), publish the next version from the same buffers, release the
// previous handle. The memory for owned copies is made at publish, and the
// previous version's copy, no longer required, gives its memory to the next.
// The spill takes the slab made at publish and leaves freeing the previous
// copy to the heartbeat thread: without a cap, the loop waits for that (a
// trainer's step between versions), since a loop with no step makes a slab
// more for each version published before the heartbeat thread has freed the
// previous copy (how many depends on the machine's load). Under a cap of
// two the loop takes no step and keeps to two: the spill then frees the
// previous copy itself.
class SpillLoop : public ::testing::TestWithParam<bool> {};

TEST_P(SpillLoop, OwnedCopiesReuseTheSpillPoolAcrossVersions) {
    bool capped = GetParam();
    Server server("tcp://127.0.0.1:0", ServiceConfig{});
    ClientConfig cfg;
    cfg.server_url = server.url();
    if (capped) cfg.spill_pool_bytes = 8 << 20;  // two slabs of 4 MiB
    Client client(cfg);
    constexpr uint64_t kBytes = 3 << 20;
    std::vector<uint8_t> a(kBytes);
    std::vector<Buffer> buffers = one_tensor(a);
    std::unique_ptr<Replica> previous;
    for (uint64_t v = 1; v <= 6; ++v) {
        std::fill(a.begin(), a.end(), static_cast<uint8_t>(v));
        auto r = client.publish("m", v, 0, 1, 1 << 20, buffers);
        if (previous) client.release(*previous);
        client.begin_mutation(*r);  // the last copy of the newest version: spilled
        previous = std::move(r);
        if (!capped) {
            ASSERT_TRUE(within_10s([&] { return client.spill_usage().lent == 4u << 20; }))
                << "the previous version's copy goes back to the pool: " << client.spill_usage().lent;
        }
    }
    SpillPool::Usage u = client.spill_usage();
    EXPECT_LE(u.slabs, 2u) << "the newest version's copy, and the slab it will take next";
    EXPECT_TRUE(within_10s([&] { return client.spill_usage().lent == 4u << 20; }))
        << "only the newest version's copy is held: " << client.spill_usage().lent;
    // The copy serves the newest version's bytes.
    std::vector<uint8_t> got(kBytes);
    FetchRequest req;
    req.model = "m";
    Client reader(cfg);
    reader.fetch(req, one_tensor(got), false);
    EXPECT_EQ(got, std::vector<uint8_t>(kBytes, 6));
    client.release(*previous);
}

INSTANTIATE_TEST_SUITE_P(Client, SpillLoop, ::testing::Bool(),
                         [](const auto &info) { return info.param ? "UnderACap" : "Uncapped"; });

// spill_ahead: the copy a spill needs is made right after each publish, so a
// mutation that comes after other work finds it made (its slab is lent
// before the mutation is asked for); one that comes at once waits for the
// rest of it. Either way the owned copy serves the version's bytes, not what
// the trainer wrote after.
TEST(Client, SpillAheadMakesTheOwnedCopyBeforeTheMutationAsksForIt) {
    Server server("tcp://127.0.0.1:0", ServiceConfig{});
    ClientConfig cfg;
    cfg.server_url = server.url();
    cfg.spill_ahead = true;
    Client client(cfg);
    constexpr uint64_t kBytes = 24 << 20;  // three pieces of the copy
    std::vector<uint8_t> a(kBytes);
    std::vector<Buffer> buffers = one_tensor(a);
    ClientConfig reader_cfg = cfg;
    reader_cfg.spill_ahead = false;
    Client reader(reader_cfg);
    std::unique_ptr<Replica> previous;
    for (uint64_t v = 1; v <= 4; ++v) {
        std::fill(a.begin(), a.end(), static_cast<uint8_t>(v));
        auto r = client.publish("m", v, 0, 1, 1 << 20, buffers);
        if (previous) client.release(*previous);
        // Version 1 is mutated at once; the others after the copy was made.
        if (v > 1) {
            EXPECT_TRUE(within_10s([&] { return client.copies_ahead() == std::pair<size_t, size_t>{1, 1}; }))
                << "the copy of version " << v << " was not made after its publish";
        }
        client.begin_mutation(*r);
        EXPECT_EQ(client.copies_ahead().first, 0u) << "the spill took the copy";
        std::fill(a.begin(), a.end(), 0xee);  // the optimizer step
        std::vector<uint8_t> got(kBytes);
        FetchRequest req;
        req.model = "m";
        req.version = v;
        reader.fetch(req, one_tensor(got), false);
        EXPECT_EQ(got, std::vector<uint8_t>(kBytes, static_cast<uint8_t>(v))) << "version " << v;
        previous = std::move(r);
    }
    EXPECT_LE(client.spill_usage().slabs, 3u) << "slabs are reused across versions";
    client.release(*previous);
}

// A copy made ahead that no spill needs goes back to the pool: the replica
// was not the last copy when it was mutated, or it was released.
TEST(Client, ACopyMadeAheadThatNoSpillNeedsIsGivenBack) {
    Server server("tcp://127.0.0.1:0", ServiceConfig{});
    ClientConfig cfg;
    cfg.server_url = server.url();
    cfg.spill_ahead = true;
    Client client(cfg);
    constexpr uint64_t kBytes = 4 << 20;
    std::vector<uint8_t> a(kBytes, 1);
    std::vector<Buffer> buffers = one_tensor(a);
    auto r1 = client.publish("m", 1, 0, 1, 1 << 20, buffers);
    ASSERT_TRUE(within_10s([&] { return client.copies_ahead().second == 1; }));
    // A reader that keeps what it read: the trainer's is no longer the last copy.
    ClientConfig reader_cfg = cfg;
    reader_cfg.spill_ahead = false;
    Client reader(reader_cfg);
    std::vector<uint8_t> got(kBytes);
    FetchRequest req;
    req.model = "m";
    FetchResult held = reader.fetch(req, one_tensor(got), true);
    ASSERT_TRUE(held.replica);
    client.begin_mutation(*r1);
    EXPECT_EQ(client.copies_ahead().first, 0u);
    EXPECT_EQ(client.spill_usage().lent, 0u) << "no spill: the copy made ahead is dropped";
    client.release(*r1);
    // Released without a spill: dropped too.
    auto r2 = client.publish("m", 2, 0, 1, 1 << 20, buffers);
    ASSERT_TRUE(within_10s([&] { return client.spill_usage().lent >= kBytes; }));
    client.release(*r2, /*retain=*/false);
    EXPECT_EQ(client.copies_ahead().first, 0u);
    EXPECT_EQ(client.spill_usage().lent, 0u);
    reader.release(*held.replica, false);
}

// Client::fetch's patience while no holder may serve its reader.
TEST(SourceWait, EndsAfterThePatienceWithoutASource) {
    using namespace std::chrono_literals;
    SourceWait wait(2000ms);
    auto t0 = Clock::now();
    EXPECT_FALSE(wait.spent(t0 + 1h));  // no wait begun
    EXPECT_TRUE(wait.begin(false, t0));
    EXPECT_FALSE(wait.begin(false, t0 + 1500ms));  // answered the same again: the same wait
    EXPECT_FALSE(wait.spent(t0 + 1999ms));
    EXPECT_TRUE(wait.spent(t0 + 2000ms));
}

// A reader whose attempt tried a source (here for 6 s: a first read that
// timed out, then no progress) was not idle: the wait begins again, or
// every source over a stalled lane would leave it no patience for the next.
TEST(SourceWait, AnAttemptThatHadASourceStartsItAfresh) {
    using namespace std::chrono_literals;
    SourceWait wait(2000ms);
    auto t0 = Clock::now();
    EXPECT_TRUE(wait.begin(false, t0));
    EXPECT_TRUE(wait.begin(true, t0 + 6s));
    EXPECT_FALSE(wait.spent(t0 + 7s));
    EXPECT_TRUE(wait.spent(t0 + 8s));
}

// A holder that closes its connection to a reader (it gave up on reads of
// its own from that reader, say) ends the reader's endpoints to it too: UCX
// pairs the endpoints two processes make to each other. The reader's next
// fetch from it fails on them, connects again and reads; it does not report
// the holder, which is fine, to the server (that would keep it from this
// reader for seconds).
TEST(Client, AReaderWhoseConnectionTheHolderClosedConnectsAgainWithoutReportingIt) {
    if (ucx_aborts_on_a_failed_wireup_reply())
        GTEST_SKIP() << "UCX before 1.14 runs no keepalive (ucx_env.hpp): the reader finds the closed connection "
                        "out by its chunk timeout, and reports the holder";
    th_support::ScopedEnv tcp("UCX_TLS", "tcp");  // shared memory reads one-sided: no connection to lose
    Server server("tcp://127.0.0.1:0", ServiceConfig{});
    ClientConfig cfg;
    cfg.server_url = server.url();
    Client holder(cfg), reader(cfg);
    std::vector<uint8_t> a(1 << 20, 1), got(1 << 20);
    auto v1 = holder.publish("m", 1, 0, 1, 256 << 10, one_tensor(a));
    FetchRequest req;
    req.model = "m";
    req.version = 1;
    reader.fetch(req, one_tensor(got), false);
    // The holder connects to the reader (UCX gives it the reader's
    // connections) and gives up on it.
    PeerRef back = holder.ucx().peer(reader.worker_id(), reader.ucx().address());
    holder.ucx().close_peer(back, "test: giving up on the reader");
    std::fill(a.begin(), a.end(), 2);
    auto v2 = holder.publish("m", 2, 0, 1, 256 << 10, one_tensor(a));
    req.version = 2;
    FetchResult r = reader.fetch(req, one_tensor(got), false);
    EXPECT_EQ(got, a);
    std::string metrics = server.service().metrics_text();
    EXPECT_NE(metrics.find("tensorhub_failures_total{kind=\"source_failed\"} 0"), std::string::npos) << metrics;
    holder.release(*v1);
    holder.release(*v2);
}

namespace {

// A reader (r1) fills a replica of its own and stops part way while its
// process stays up: its fetching thread waits in its progress callback, so
// nothing more lands in its replica, but its progress thread answers every
// read. A second reader, planned onto r1's replica (the publisher takes one
// reader at a time), waits for chunks that do not come. r1 is starved, not
// broken: the second reader reads the rest elsewhere without reporting r1
// (a report would keep r1 from it for seconds and count towards taking r1
// out of service for everyone), and nobody is planned onto r1's replica
// until it moves again.
void a_starved_source_is_left_but_not_reported(const char *transports) {
    th_support::ScopedEnv tls("UCX_TLS", transports);
    ServiceConfig scfg;
    scfg.policy.max_readers_per_source = 1;
    Server server("tcp://127.0.0.1:0", scfg);
    ClientConfig cfg;
    cfg.server_url = server.url();
    Client holder(cfg);
    cfg.chunk_timeout_ms = 60'000;  // r1 never gives up on its own source here
    Client r1(cfg);
    // Long enough for the first reads of a new connection on a loaded
    // machine (the sanitizer run): a source whose reads do not come back
    // within it is failed and reported, rightly.
    cfg.chunk_timeout_ms = 3'000;
    Client r2(cfg), r3(cfg);

    std::vector<uint8_t> a(32 << 20);
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint8_t>(i * 7 + i / 4099);
    auto v1 = holder.publish("m", 1, 0, 1, 64 << 10, one_tensor(a));

    std::mutex mu;
    std::condition_variable cv;
    bool stalled = false, resume = false;
    std::vector<uint8_t> got1(a.size());
    FetchResult res1;
    std::thread t1([&] {
        FetchRequest req;
        req.model = "m";
        req.version = 1;
        req.progress_interval_ms = 1;
        req.progress = [&](uint64_t done, uint64_t wanted) {
            std::unique_lock lk(mu);
            if (stalled || done == 0 || done == wanted) return;
            stalled = true;
            cv.notify_all();
            cv.wait(lk, [&] { return resume; });
        };
        res1 = r1.fetch(req, one_tensor(got1), /*serve=*/true);
    });
    {
        std::unique_lock lk(mu);
        ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(20), [&] { return stalled; }));
    }
    FetchRequest req;
    req.model = "m";
    req.version = 1;
    std::vector<uint8_t> got2(a.size()), got3(a.size());
    FetchResult res2 = r2.fetch(req, one_tensor(got2), false);
    EXPECT_EQ(got2, a);
    EXPECT_EQ(res2.stats.failed_sources, 1u);  // r1, left
    // r1 still stands still: the next reader is planned elsewhere at once.
    FetchResult res3 = r3.fetch(req, one_tensor(got3), false);
    EXPECT_EQ(got3, a);
    EXPECT_EQ(res3.stats.failed_sources, 0u);
    {
        std::lock_guard lk(mu);
        resume = true;
        cv.notify_all();
    }
    t1.join();
    EXPECT_EQ(got1, a);
    std::string metrics = server.service().metrics_text();
    EXPECT_NE(metrics.find("tensorhub_failures_total{kind=\"source_failed\"} 0"), std::string::npos) << metrics;
    EXPECT_NE(metrics.find("tensorhub_failures_total{kind=\"source_stalled\"} 1"), std::string::npos) << metrics;
    r1.release(*res1.replica);
    holder.release(*v1);
}

}  // namespace

TEST(Client, AStarvedSourceIsLeftButNotReportedOverTcp) { a_starved_source_is_left_but_not_reported("tcp"); }

// UCX's own choice on one host: shared memory, read one-sided.
TEST(Client, AStarvedSourceIsLeftButNotReportedOverSharedMemory) { a_starved_source_is_left_but_not_reported(nullptr); }

// A server that does not know this worker (restarted, or taking over) answers
// every call of it "unknown worker". Calls made on several threads at once
// then register it once: each Hello makes the server forget the worker's
// replicas until they are declared again, so a second one races the calls
// that depend on them (an owned copy declared between a Hello and the
// declarations after it found its version forgotten: a trainer's mutation
// failed with a conflict).
TEST(Client, CallsOnManyThreadsThatFindTheWorkerUnknownRegisterItOnce) {
    auto server = std::make_unique<Server>("tcp://127.0.0.1:0", ServiceConfig{});
    std::string url = server->url();
    ClientConfig cfg;
    cfg.server_url = url;
    cfg.heartbeat_ms = 60'000;  // only the calls below find out
    Client client(cfg);
    std::vector<uint8_t> a(1 << 16, 3);
    auto v1 = client.publish("m", 1, 0, 1, 16 << 10, one_tensor(a));
    server.reset();
    server = std::make_unique<Server>(url, ServiceConfig{});
    std::vector<std::thread> callers;
    std::atomic<int> resolved{0};
    // Waiting for a version, as a rollout worker does: a call sent between
    // the Hello and the declaration of the worker's replica may find the
    // version not back yet, and waits for it.
    for (int i = 0; i < 8; ++i)
        callers.emplace_back([&] {
            try {
                if (client.wait_for_version("m", 0, 10'000) == 1) resolved++;
            } catch (const std::exception &e) {
                ADD_FAILURE() << e.what();
            }
        });
    for (auto &t : callers) t.join();
    EXPECT_EQ(resolved.load(), 8);
    std::string metrics = server->service().metrics_text();
    EXPECT_NE(metrics.find("tensorhub_registrations_total{kind=\"new\"} 1\n"), std::string::npos) << metrics;
    EXPECT_NE(metrics.find("tensorhub_registrations_total{kind=\"again\"} 0\n"), std::string::npos) << metrics;
    client.release(*v1, false);
}

// A server that forgot a worker's replica (it took over knowing a newer
// version, and the replica's version, held by nobody else, was gone when the
// worker declared it again) routes nobody to it: the worker may change its
// buffers at once. Before, begin_mutation failed with "replica ... is not
// registered", and the trainer's step with it.
TEST(Client, ABufferTheServerNoLongerListsMayChangeAtOnce) {
    auto server = std::make_unique<Server>("tcp://127.0.0.1:0", ServiceConfig{});
    std::string url = server->url();
    ClientConfig cfg;
    cfg.server_url = url;
    cfg.heartbeat_ms = 60'000;  // registers again only when a call finds out
    Client old_holder(cfg), publisher(cfg);
    std::vector<uint8_t> a(1 << 16, 3), b(1 << 16, 4);
    auto v1 = old_holder.publish("m", 1, 0, 1, 16 << 10, one_tensor(a));
    server.reset();
    server = std::make_unique<Server>(url, ServiceConfig{});
    auto v2 = publisher.publish("m", 2, 0, 1, 16 << 10, one_tensor(b));  // registers, then publishes: latest is 2
    EXPECT_EQ(old_holder.resolve("m", UINT64_MAX), 2u);  // registers again; version 1 is refused
    EXPECT_NO_THROW(old_holder.begin_mutation(*v1));
    old_holder.release(*v1, false);
    publisher.release(*v2, false);
}

// Run by ctest as unit_during_registration, with
// TENSORHUB_FAULT_REDECLARE_DELAY_US set: faults are read once a process.
// The server forgot a trainer (its lease ran out, or the server restarted);
// a call of one of its threads registers it again, and the server lists
// none of its replicas until they are declared again (the fault hook holds
// the declarations for 1/2 s). Calls on the trainer's other threads
// meanwhile must not take what they find missing as gone.
class ClientFaults : public ::testing::Test {
  protected:
    void SetUp() override {
        if (faults().redeclare_delay_us == 0)
            GTEST_SKIP() << "needs TENSORHUB_FAULT_REDECLARE_DELAY_US (ctest unit_during_registration)";
        // Longer than the fault's delay: the lease runs out once, not again
        // while the trainer declares its replicas.
        ServiceConfig scfg;
        scfg.lease_ms = 2'000;
        server_ = std::make_unique<Server>("tcp://127.0.0.1:0", scfg);
        cfg_.server_url = server_->url();
        cfg_.heartbeat_ms = 60'000;  // the trainer's lease runs out
        trainer_ = std::make_unique<Client>(cfg_);
        v1_ = trainer_->publish("m", 1, 0, 1, 16 << 10, one_tensor(weights_));
    }
    void TearDown() override {
        if (registering_.joinable()) registering_.join();
        if (v1_) trainer_->release(*v1_, false);
    }
    enum class Forgotten { LeaseExpired, ServerRestarted };
    // Returns once the trainer said Hello again; its declarations follow
    // after the fault's delay.
    void register_trainer_again(Forgotten how) {
        auto registered = [&](const char *n) {
            return server_->service().metrics_text().find(str("tensorhub_registrations_total{kind=\"new\"} ", n, "\n")) !=
                   std::string::npos;
        };
        if (how == Forgotten::LeaseExpired) {
            ASSERT_TRUE(within_10s(
                [&] { return server_->service().metrics_text().find("kind=\"lease_expired\"} 1") != std::string::npos; }));
        } else {
            std::string url = server_->url();
            server_.reset();
            server_ = std::make_unique<Server>(url, ServiceConfig{});
        }
        registering_ = std::jthread([&] {
            try {
                trainer_->wait_for_version("m", 0, 10'000);  // finds the trainer unknown: registers it again
            } catch (const std::exception &e) {
                ADD_FAILURE() << e.what();
            }
        });
        ASSERT_TRUE(within_10s([&] { return registered(how == Forgotten::LeaseExpired ? "2" : "1"); }));
    }

    std::vector<uint8_t> weights_ = std::vector<uint8_t>(1 << 16, 5);
    std::unique_ptr<Server> server_;
    ClientConfig cfg_;
    std::unique_ptr<Client> trainer_;
    std::unique_ptr<Replica> v1_;
    std::jthread registering_;
};

// A mutation finds its replica not listed: taking that as "nobody needs
// it" changes the last copy of the newest version unkept, and the version
// is gone.
TEST_F(ClientFaults, AMutationDuringARegistrationWaitsForItsDeclarations) {
    std::vector<uint8_t> want = weights_, got(weights_.size());
    register_trainer_again(Forgotten::LeaseExpired);
    trainer_->begin_mutation(*v1_);
    std::fill(weights_.begin(), weights_.end(), 6);  // the step
    registering_.join();
    cfg_.heartbeat_ms = TH_DEFAULT_HEARTBEAT_MS;
    Client reader(cfg_);
    FetchRequest req;
    req.model = "m";
    req.version = 1;
    reader.fetch(req, one_tensor(got), false);  // from the owned copy the mutation kept
    EXPECT_EQ(got, want);
}

// A restarted server knows no version until its holders declare it: the
// trainer asking for its own finds it, rather than "unknown model".
TEST_F(ClientFaults, AResolveDuringARegistrationFindsTheWorkersOwnVersion) {
    register_trainer_again(Forgotten::ServerRestarted);
    EXPECT_EQ(trainer_->resolve("m", UINT64_MAX), 1u);
}
