// The ROS mechanisms through the public API: the mutability contract, the
// retention protocol, pins, and notifications.
#include <gtest/gtest.h>

#include <future>
#include <optional>

#include "harness.hpp"

using namespace th_test;

namespace {

class Ros : public ::testing::Test {
  protected:
    th_server *server = start_server();
    std::string url = th_server_url(server);
    void TearDown() override { th_server_destroy(server); }

    // Owned copies of (model, v) in the status.
    int owned(const std::string &model, uint64_t v) {
        auto ver = version_status(server_status(url), model, v);
        int n = 0;
        if (!ver.is_null())
            for (const auto &sh : ver["shards"])
                for (const auto &r : sh["replicas"]) n += r["owned"].get<bool>();
        return n;
    }
};

void scribble(Shard &s) {
    for (auto &d : s.data) std::memset(d.data(), 0xee, d.size());
}

}  // namespace

TEST_F(Ros, MutatingTheOnlyHolderSpillsSoTheVersionStaysReadable) {
    th_client *trainer = connect(url, "trainer");
    th_client *reader = connect(url, "reader");
    Shard w(2, 1 << 20, 1);
    auto v1 = w.data;  // what version 1 was
    th_replica *r1 = nullptr;
    ASSERT_EQ(publish(trainer, "policy", 1, 0, 1, w, &r1), TH_OK) << th_last_error();
    // Optimizer step in place, before any reader came.
    ASSERT_EQ(th_replica_begin_mutation(r1), TH_OK) << th_last_error();
    scribble(w);
    EXPECT_EQ(owned("policy", 1), 1);
    Shard got(2, 1 << 20);
    ASSERT_EQ(fetch(reader, "policy", 1, 0, got), TH_OK) << th_last_error();
    EXPECT_EQ(got.data, v1);
    EXPECT_EQ(th_replica_release(r1), TH_OK);

    // Version 2 from the same buffers; once it has a reader, version 1 is no
    // longer required and its owned copy goes away.
    w.fill(2, 0);
    th_replica *r2 = nullptr;
    ASSERT_EQ(publish(trainer, "policy", 2, 0, 1, w, &r2), TH_OK) << th_last_error();
    uint64_t v = 0;
    ASSERT_EQ(fetch(reader, "policy", TH_LATEST, 0, got, &v), TH_OK) << th_last_error();
    EXPECT_EQ(v, 2u);
    EXPECT_TRUE(eventually(url, [&](const nlohmann::json &s) { return version_status(s, "policy", 1).is_null(); }))
        << server_status(url).dump(1);
    th_replica_release(r2);
    th_client_destroy(reader);
    th_client_destroy(trainer);
}

TEST_F(Ros, RetentionPolicyFailRefusesAndKeepsServing) {
    th_client *trainer = connect(url, "trainer", 5000, TH_RETAIN_FAIL);
    Shard w(1, 256 << 10, 1);
    th_replica *r1 = nullptr;
    ASSERT_EQ(publish(trainer, "policy", 1, 0, 1, w, &r1), TH_OK);
    EXPECT_ERROR(th_replica_begin_mutation(r1), TH_ERR_RETAINED, "last complete copy of a required version");
    EXPECT_ERROR(th_replica_release(r1), TH_ERR_RETAINED, "model 'policy' version 1 shard 0");
    // Still served, handle still valid.
    th_client *reader = connect(url, "reader");
    Shard got(1, 256 << 10);
    ASSERT_EQ(fetch(reader, "policy", 1, 0, got), TH_OK) << th_last_error();
    EXPECT_EQ(got.data, w.data);
    // Once another complete copy exists, giving it up is fine.
    th_replica *copy = nullptr;
    ASSERT_EQ(fetch(reader, "policy", 1, 0, got, nullptr, &copy), TH_OK);
    EXPECT_EQ(th_replica_release(r1), TH_OK) << th_last_error();
    EXPECT_EQ(owned("policy", 1), 0);
    th_replica_release(copy);
    th_client_destroy(reader);
    th_client_destroy(trainer);
}

TEST_F(Ros, PinnedVersionsOutliveTheirHolders) {
    th_client *trainer = connect(url, "trainer");
    th_client *reader = connect(url, "reader");
    Shard a(1, 128 << 10, 1), b(1, 128 << 10, 2);
    th_replica *r1 = nullptr, *r2 = nullptr;
    ASSERT_EQ(publish(trainer, "m", 1, 0, 1, a, &r1), TH_OK);
    ASSERT_EQ(th_pin(reader, "m", 1), TH_OK) << th_last_error();
    ASSERT_EQ(publish(trainer, "m", 2, 0, 1, b, &r2), TH_OK);
    ASSERT_EQ(th_replica_release(r1), TH_OK);  // v1 is pinned: spilled
    Shard got(1, 128 << 10);
    ASSERT_EQ(fetch(reader, "m", 1, 0, got), TH_OK) << th_last_error();
    EXPECT_EQ(got.data, a.data);
    ASSERT_EQ(th_unpin(reader, "m", 1), TH_OK);
    EXPECT_ERROR(th_unpin(reader, "m", 1), TH_ERR_NOT_FOUND, "not pinned");
    EXPECT_ERROR(th_pin(reader, "m", 9), TH_ERR_NOT_FOUND, "no version 9");
    EXPECT_TRUE(eventually(url, [&](const nlohmann::json &s) { return version_status(s, "m", 1).is_null(); }));
    th_replica_release(r2);
    th_client_destroy(reader);
    th_client_destroy(trainer);
}

TEST_F(Ros, ReaderSlowedOnPurposeNeverReturnsMixedBytesWhenItsSourceMutates) {
    // The trainer waits only 100 ms for reads to drain, far less than the
    // slowed read takes, so it overwrites while the reader is mid-read.
    th_client_config cc;
    th_client_config_init(&cc, sizeof cc);
    cc.server_url = url.c_str();
    cc.worker_name = "trainer";
    cc.mutation_wait_ms = 100;
    th_client *trainer = nullptr;
    ASSERT_EQ(th_client_create(&trainer, &cc), TH_OK) << th_last_error();
    // 16 MiB in 64 KiB chunks, 3 ms per chunk: the read takes ~0.75 s.
    Shard w(4, 4 << 20, 1);
    th_replica *r1 = nullptr;
    ASSERT_EQ(publish(trainer, "slow", 1, 0, 1, w, &r1), TH_OK);
    Process reader(worker({"fetch", "--server", url, "--name", "slowpoke", "--model", "slow", "--shard-kb", "16384",
                        "--tensors", "4", "--no-serve"},
                       {"TENSORHUB_FAULT_CHUNK_DELAY_US=3000"}));
    ASSERT_TRUE(eventually(url, [&](const nlohmann::json &s) {
        auto v = version_status(s, "slow", 1);
        return !v.is_null() && v["shards"][0]["replicas"][0]["active_reads"].get<int>() > 0;
    }));
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    // The trainer overwrites mid-read. The reader must notice (generation) and
    // re-read from the owned copy the trainer spilled; over tcp the copy
    // answers for the trainer's replica instead, unnoticed
    // (GuardedRos.AReaderOfTheLastCopyReadsOnFromItsSpillWithoutANewPlan).
    ASSERT_EQ(th_replica_begin_mutation(r1), TH_OK) << th_last_error();
    scribble(w);
    std::string l = reader.line(60000);
    EXPECT_EQ(l.rfind("ok", 0), 0u) << l;  // the worker checks every byte against version 1
    EXPECT_EQ(owned("slow", 1), 1);
    if (reads_one_sided() == false) {
        EXPECT_NE(l.find(" replans=0"), std::string::npos) << l;
        th_replica_release(r1);
        th_client_destroy(trainer);
        return;
    }
    // The reader finished from the owned copy: part of its bytes came from it.
    auto v = version_status(server_status(url), "slow", 1);
    uint64_t from_copy = 0;
    for (const auto &r : v["shards"][0]["replicas"])
        if (r["owned"].get<bool>()) from_copy = r["bytes_served"];
    EXPECT_GT(from_copy, 0u) << v.dump(1);
    EXPECT_LT(from_copy, 16u << 20) << "the reader re-read everything: the mutation came too early";
    th_replica_release(r1);
    th_client_destroy(trainer);
}

// On the active-message path a reader's reads are guarded: the holder answers
// them only while the generation they name holds, and begin_mutation lets
// those it took up finish before it returns. The trainer scribbles the moment
// begin_mutation returns, and the reader checks no checksum: a byte sent
// after the change would reach the worker's check of every byte. A few
// rounds, since where the change falls is up to timing. (Over loopback an
// answer leaves in microseconds: the holder's wait for a long one is
// GuardedReads.EndingAGenerationLetsTheAnswersTakenUpFinishFirst.)
class GuardedRos : public Ros {
  protected:
    void SetUp() override {
        if (reads_one_sided() != false) GTEST_SKIP() << "guarded reads are the active-message path (ctest: UCX_TLS=tcp)";
    }
    th_client *trainer(const char *name) {
        th_client_config cc;
        th_client_config_init(&cc, sizeof cc);
        cc.server_url = url.c_str();
        cc.worker_name = name;
        cc.mutation_wait_ms = 0;  // no waiting for the reader: it is mid-read when the bytes change
        th_client *c = nullptr;
        EXPECT_EQ(th_client_create(&c, &cc), TH_OK) << th_last_error();
        return c;
    }
    // A reader of version v of "keep" (16 MiB in 64 KiB chunks, 3 ms per
    // chunk: ~0.75 s), once the server has planned it onto a replica: the
    // worker id of that replica's holder.
    uint64_t start_reader(uint64_t v, std::optional<Process> &reader) {
        reader.emplace(worker({"fetch", "--server", url, "--name", "reader" + std::to_string(v), "--model", "keep",
                               "--version", std::to_string(v), "--shard-kb", "16384", "--tensors", "4", "--no-serve",
                               "--verify", "off"},
                              {"TENSORHUB_FAULT_CHUNK_DELAY_US=3000"}));
        uint64_t holder = 0;
        EXPECT_TRUE(eventually(url, [&](const nlohmann::json &s) {
            auto ver = version_status(s, "keep", v);
            if (ver.is_null()) return false;
            for (const auto &r : ver["shards"][0]["replicas"])
                if (r["active_reads"].get<int>() > 0) holder = r["worker_id"].get<uint64_t>();
            return holder != 0;
        }));
        std::this_thread::sleep_for(std::chrono::milliseconds(150));
        return holder;
    }
};

// The trainer holds the only copy: it spills, and the copy answers the
// reader's reads from then on. The reader never learns that its source
// changed: no new plan, nothing read twice. Unless an answer took over a
// second (a loaded machine): the reader then confirms it with the source's
// word, sees the change, keeps what it got and plans the rest, as without a
// spill. So every round must deliver the version, and not every round may
// re-plan (without the spill's answers, every round does).
TEST_F(GuardedRos, AReaderOfTheLastCopyReadsOnFromItsSpillWithoutANewPlan) {
    th_client *t = trainer("trainer");
    int without_a_plan = 0;
    for (uint64_t v = 1; v <= 3; ++v) {
        Shard w(4, 4 << 20, v);
        th_replica *r = nullptr;
        ASSERT_EQ(publish(t, "keep", v, 0, 1, w, &r), TH_OK);
        std::optional<Process> reader;
        ASSERT_EQ(start_reader(v, reader), th_client_worker_id(t));
        ASSERT_EQ(th_replica_begin_mutation(r), TH_OK) << th_last_error();
        EXPECT_EQ(owned("keep", v), 1);
        scribble(w);
        std::string l = reader->line(60000);
        ASSERT_EQ(l.rfind("ok", 0), 0u) << l;  // version v's bytes, every one checked by the worker
        if (l.find(" replans=0") != std::string::npos) ++without_a_plan;
        else std::printf("round %llu re-planned: %s\n", static_cast<unsigned long long>(v), l.c_str());
        th_replica_release(r);
    }
    EXPECT_GE(without_a_plan, 1) << "no round's reader read on from the spill";
    th_client_destroy(t);
}

// Another complete copy exists: nothing is spilled, the reader is refused
// once the generation ended, keeps what its guarded reads got before (the
// holder let them finish) and reads the rest from the other copy.
TEST_F(GuardedRos, WhatAReaderKeepsAcrossItsSourcesChangeIsNeverWrittenAfterIt) {
    th_client *a = trainer("trainer-a"), *b = trainer("trainer-b");
    for (uint64_t v = 1; v <= 3; ++v) {
        Shard wa(4, 4 << 20, v), wb(4, 4 << 20, v);
        th_replica *ra = nullptr, *rb = nullptr;
        ASSERT_EQ(publish(a, "keep", v, 0, 1, wa, &ra), TH_OK);
        ASSERT_EQ(publish(b, "keep", v, 0, 1, wb, &rb), TH_OK);
        std::optional<Process> reader;
        bool from_a = start_reader(v, reader) == th_client_worker_id(a);
        ASSERT_EQ(th_replica_begin_mutation(from_a ? ra : rb), TH_OK) << th_last_error();
        scribble(from_a ? wa : wb);
        EXPECT_EQ(owned("keep", v), 0);
        std::string l = reader->line(60000);
        ASSERT_EQ(l.rfind("ok", 0), 0u) << l;
        EXPECT_EQ(l.find(" replans=0"), std::string::npos) << l;
        th_replica_release(ra);
        th_replica_release(rb);
    }
    th_client_destroy(a);
    th_client_destroy(b);
}

TEST_F(Ros, WaitForVersionWakesOnCommitAndCatchesUpWithoutEvents) {
    th_client *trainer = connect(url, "trainer");
    th_client *rollout = connect(url, "rollout");
    Shard w(1, 64 << 10, 1);
    th_replica *r1 = nullptr, *r2 = nullptr, *r3 = nullptr;
    ASSERT_EQ(publish(trainer, "m", 1, 0, 1, w, &r1), TH_OK);
    uint64_t got = 0;
    ASSERT_EQ(th_wait_for_version(rollout, "m", 0, 1000, &got), TH_OK) << th_last_error();
    EXPECT_EQ(got, 1u);
    EXPECT_ERROR(th_wait_for_version(rollout, "m", 1, 300, &got), TH_ERR_TIMEOUT, "newer than 1");

    auto waiter = std::async(std::launch::async, [&] {
        uint64_t v = 0;
        th_status st = th_wait_for_version(rollout, "m", 1, 10000, &v);
        return std::make_pair(st, v);
    });
    // A second waiter that ignores every event still sees the commit.
    Process deaf(worker({"wait", "--server", url, "--model", "m", "--newer-than", "1", "--wait-ms", "10000"},
                     {"TENSORHUB_FAULT_DROP_EVENTS=1"}));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ASSERT_EQ(publish(trainer, "m", 2, 0, 1, w, &r2), TH_OK);
    auto [st, v] = waiter.get();
    EXPECT_EQ(st, TH_OK) << th_last_error();
    EXPECT_EQ(v, 2u);
    std::string l = deaf.line(15000);
    EXPECT_EQ(l, "ok version=2");
    ASSERT_EQ(publish(trainer, "m", 3, 0, 1, w, &r3), TH_OK);
    th_replica_release(r1);
    th_replica_release(r2);
    th_replica_release(r3);
    th_client_destroy(rollout);
    th_client_destroy(trainer);
}

TEST_F(Ros, DescribeGivesTheLayoutToAllocateFrom) {
    th_client *trainer = connect(url, "trainer");
    Shard w(3, 64 << 10, 1);
    th_replica *r = nullptr;
    ASSERT_EQ(publish(trainer, "m", 5, 0, 1, w, &r), TH_OK);
    char *json = nullptr;
    ASSERT_EQ(th_describe_json(trainer, "m", TH_LATEST, 0, &json), TH_OK) << th_last_error();
    auto d = nlohmann::json::parse(json);
    th_free(json);
    EXPECT_EQ(d["version"], 5);
    EXPECT_EQ(d["total_bytes"], 3 * (64 << 10));
    ASSERT_EQ(d["tensors"].size(), 3u);
    EXPECT_EQ(d["tensors"][1]["name"], "w1");
    EXPECT_EQ(d["tensors"][1]["dtype"], "bfloat16");
    EXPECT_EQ(d["tensors"][1]["dtype_id"], TH_DTYPE_BFLOAT16);
    EXPECT_EQ(d["tensors"][1]["shape"][0], 32768);
    EXPECT_ERROR(th_describe_json(trainer, "m", 5, 3, &json), TH_ERR_INVALID_ARG, "shard 3 is out of range");
    th_replica_release(r);
    th_client_destroy(trainer);
}

TEST_F(Ros, AReleasedReplicaWhoseSlotServesTheNextVersionIsNotReadAsTheOld) {
    // The reader gets a plan for version 1, then waits before reading. Meanwhile
    // the trainer releases version 1 and publishes version 2 from the same
    // buffers: the control-word slot is reused. The reader must notice that
    // the word is no longer version 1's and read version 1 elsewhere.
    th_client *trainer = connect(url, "trainer");
    Shard w(2, 1 << 20, 1);
    th_replica *r1 = nullptr, *r2 = nullptr;
    ASSERT_EQ(publish(trainer, "reuse", 1, 0, 1, w, &r1), TH_OK);
    Process reader(worker({"fetch", "--server", url, "--name", "late", "--model", "reuse", "--version", "1", "--shard-kb",
                        "2048", "--tensors", "2", "--no-serve"},
                       {"TENSORHUB_FAULT_PLAN_DELAY_US=800000"}));
    ASSERT_TRUE(eventually(url, [&](const nlohmann::json &s) {
        auto v = version_status(s, "reuse", 1);
        return !v.is_null() && v["shards"][0]["replicas"][0]["active_reads"].get<int>() > 0;
    }));
    ASSERT_EQ(th_replica_release(r1), TH_OK) << th_last_error();  // spilled: a reader needs it
    w.fill(2, 0);
    ASSERT_EQ(publish(trainer, "reuse", 2, 0, 1, w, &r2), TH_OK) << th_last_error();
    std::string l = reader.line(30000);
    EXPECT_EQ(l.rfind("ok", 0), 0u) << l;  // version 1's bytes, checked by the worker
    th_replica_release(r2);
    th_client_destroy(trainer);
}

TEST_F(Ros, ASpillThatOutlastsTheControlTimeoutStillCompletesTheMutation) {
    // Spilling a large shard is local work that can take longer than the
    // client's timeout_ms (seconds for GBs); the calls to the server after it
    // are owed a deadline of their own, not what the copy left of one.
    Process trainer(worker({"publish", "--server", url, "--name", "trainer", "--model", "big", "--timeout-ms", "1000",
                         "--mutation-wait-ms", "200", "--mutate"},
                        {"TENSORHUB_FAULT_SPILL_DELAY_US=2500000"}));
    std::string l = trainer.line(30000);
    ASSERT_EQ(l.rfind("ready", 0), 0u) << l;
    EXPECT_EQ(owned("big", 1), 1);
    Process reader(worker({"fetch", "--server", url, "--name", "reader", "--model", "big", "--version", "1", "--no-serve"}));
    l = reader.line(30000);
    EXPECT_EQ(l.rfind("ok", 0), 0u) << l;  // version 1's bytes (checked by the worker), from the owned copy
}
