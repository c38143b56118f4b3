// Several real processes: a publisher with 2 shards of 64 MiB and 3 readers
// fetching LATEST; every byte verified; the status proves readers served
// readers. ctest runs it with the default transports and with UCX_TLS=tcp.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "harness.hpp"

using namespace th_test;

TEST(Cluster, ReadersFetchLatestFromPublisherAndFromEachOther) {
    th_server_config sc;
    th_server_config_init(&sc, sizeof sc);
    th_server *server = nullptr;
    ASSERT_EQ(th_server_create(&server, &sc), TH_OK) << th_last_error();
    std::unique_ptr<th_server, void (*)(th_server *)> guard(server, th_server_destroy);
    std::string url = th_server_url(server);
    const std::string shard_kb = std::to_string(64 * 1024);

    Process pub({TH_TEST_WORKER, "publish", "--server", url, "--name", "publisher", "--model", "policy", "--version", "3",
              "--shards", "2", "--shard-kb", shard_kb, "--tensors", "5", "--chunk-kb", "1024"});
    std::string ready = pub.line();
    ASSERT_EQ(ready.rfind("ready", 0), 0u) << ready;
    uint64_t publisher = field(ready, "worker");

    std::vector<std::unique_ptr<Process>> readers;
    for (int i = 0; i < 3; ++i)
        readers.push_back(std::make_unique<Process>(std::vector<std::string>{
            TH_TEST_WORKER, "fetch", "--server", url, "--name", "reader" + std::to_string(i), "--model", "policy",
            "--shards", "0,1", "--shard-kb", shard_kb, "--tensors", "5"}));
    for (auto &r : readers) {
        std::string l = r->line(120000);
        ASSERT_EQ(l.rfind("ok", 0), 0u) << l;
        EXPECT_EQ(field(l, "version"), 3u);
    }

    auto s = server_status(url);
    ASSERT_EQ(s["models"].size(), 1u);
    const auto &v = s["models"][0]["versions"][0];
    EXPECT_EQ(v["version"], 3);
    EXPECT_TRUE(v["committed"].get<bool>());
    uint64_t from_readers = 0, from_publisher = 0;
    std::map<uint64_t, uint64_t> per_reader;
    for (const auto &r : v["reads"]) {
        (r["source"].get<uint64_t>() == publisher ? from_publisher : from_readers) += r["bytes"].get<uint64_t>();
        per_reader[r["reader"].get<uint64_t>()] += r["bytes"].get<uint64_t>();
    }
    EXPECT_GT(from_readers, 0u) << s.dump(1);
    EXPECT_EQ(per_reader.size(), 3u);
    const uint64_t shard_bytes = (64ull << 20) / 5 / 2 * 2 * 5;  // 5 tensors, as the worker sizes them
    for (auto &[reader, bytes] : per_reader) EXPECT_EQ(bytes, 2 * shard_bytes);
    EXPECT_EQ(from_publisher + from_readers, 3 * 2 * shard_bytes);
    // Every reader now holds both shards: 4 complete replicas each.
    for (const auto &sh : v["shards"]) {
        int complete = 0;
        for (const auto &r : sh["replicas"]) complete += r["complete"].get<bool>();
        EXPECT_EQ(complete, 4);
    }
    for (auto &r : readers) EXPECT_EQ(r->stop(), 0);
    EXPECT_EQ(pub.stop(), 0);
}

namespace {

std::map<uint64_t, std::string> worker_dcs(const nlohmann::json &s) {
    std::map<uint64_t, std::string> out;
    for (const auto &w : s["workers"]) out[w["worker_id"].get<uint64_t>()] = w["labels"].value("dc", "");
    return out;
}

}  // namespace

TEST(Cluster, ReadersStartedTogetherFormChainsInsteadOfHittingThePublisher) {
    ServerGuard srv;
    const std::string kb = std::to_string(32 * 1024);
    Process pub(worker({"publish", "--server", srv.url, "--name", "publisher", "--model", "p", "--version", "1",
                     "--shard-kb", kb, "--tensors", "4", "--chunk-kb", "256"}));
    std::string ready = pub.line();
    ASSERT_EQ(ready.rfind("ready", 0), 0u) << ready;
    uint64_t publisher = field(ready, "worker");
    std::vector<std::unique_ptr<Process>> readers;
    for (int i = 0; i < 6; ++i)
        readers.push_back(std::make_unique<Process>(worker({"fetch", "--server", srv.url, "--name", "r" + std::to_string(i),
                                                         "--model", "p", "--shard-kb", kb, "--tensors", "4"})));
    for (auto &r : readers) {
        std::string l = r->line(120000);
        ASSERT_EQ(l.rfind("ok", 0), 0u) << l;
    }
    auto v = version_status(server_status(srv.url), "p", 1);
    ASSERT_FALSE(v.is_null());
    const uint64_t shard = (32ull << 20) / 4 / 2 * 2 * 4;
    std::map<uint64_t, uint64_t> from_publisher, total;
    for (const auto &r : v["reads"]) {
        uint64_t reader = r["reader"], bytes = r["bytes"];
        total[reader] += bytes;
        if (r["source"].get<uint64_t>() == publisher) from_publisher[reader] += bytes;
    }
    ASSERT_EQ(total.size(), 6u);
    uint64_t publisher_bytes = 0;
    int mostly_from_readers = 0;
    for (auto &[reader, bytes] : total) {
        EXPECT_EQ(bytes, shard);
        publisher_bytes += from_publisher[reader];
        mostly_from_readers += from_publisher[reader] * 2 < bytes;
    }
    // Every reader but the first read most chunks from another reader, and
    // the publisher's uplink carried at most about twice the shard.
    EXPECT_GE(mostly_from_readers, 5) << v.dump(1);
    EXPECT_LE(publisher_bytes, 2 * shard) << v.dump(1);
    for (auto &r : readers) EXPECT_EQ(r->stop(), 0);
}

TEST(Cluster, OnlyOneReaderPerShardCrossesToTheOtherDatacenter) {
    ServerGuard srv;
    const std::string kb = std::to_string(8 * 1024);
    Process pub(worker({"publish", "--server", srv.url, "--name", "publisher", "--labels", "dc=east,rack=e1,host=p",
                     "--model", "x", "--version", "1", "--shards", "2", "--shard-kb", kb, "--chunk-kb", "256"}));
    ASSERT_EQ(pub.line().rfind("ready", 0), 0u);
    std::vector<std::unique_ptr<Process>> readers;
    for (int i = 0; i < 5; ++i) {
        std::string dc = i < 2 ? "east" : "west";
        std::string name = dc + std::to_string(i);
        readers.push_back(std::make_unique<Process>(
            worker({"fetch", "--server", srv.url, "--name", name, "--labels", "dc=" + dc + ",rack=" + dc + "1,host=" + name,
                    "--model", "x", "--shards", "0,1", "--shard-kb", kb})));
    }
    for (auto &r : readers) {
        std::string l = r->line(120000);
        ASSERT_EQ(l.rfind("ok", 0), 0u) << l;
    }
    auto s = server_status(srv.url);
    auto dcs = worker_dcs(s);
    auto v = version_status(s, "x", 1);
    int crossings[2] = {0, 0};
    for (const auto &r : v["reads"])
        if (dcs[r["reader"].get<uint64_t>()] != dcs[r["source"].get<uint64_t>()]) crossings[r["shard"].get<int>()]++;
    EXPECT_EQ(crossings[0], 1) << v.dump(1);
    EXPECT_EQ(crossings[1], 1) << v.dump(1);
    for (auto &r : readers) EXPECT_EQ(r->stop(), 0);
}

TEST(Cluster, ReadersNeverAssembleShardsOfTwoVersions) {
    ServerGuard srv;
    // 4 shards published one by one with delays, version after version, while
    // readers resolve LATEST once per round and fetch all 4 shards of it.
    Process pub(worker({"publish-loop", "--server", srv.url, "--name", "trainer", "--model", "tp", "--shards", "4",
                     "--versions", "40", "--delay-ms", "15", "--shard-kb", "512", "--tensors", "3", "--timeout-ms", "5000"}));
    std::vector<std::unique_ptr<Process>> readers;
    for (int i = 0; i < 2; ++i)
        readers.push_back(std::make_unique<Process>(worker({"fetch-loop", "--server", srv.url, "--name", "rollout" + std::to_string(i),
                                                         "--model", "tp", "--shards", "4", "--shard-kb", "512", "--tensors",
                                                         "3", "--for-ms", "2500"})));
    for (auto &r : readers) {
        std::string l = r->line(60000);
        ASSERT_EQ(l.rfind("ok", 0), 0u) << l;
        EXPECT_GT(field(l, "rounds"), 0u) << l;
        EXPECT_GT(field(l, "versions"), 1u) << l;  // it did see versions change under it
    }
    EXPECT_EQ(pub.line(60000).rfind("ready", 0), 0u);
}
