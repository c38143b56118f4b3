// Several real processes: a publisher with 2 shards of 64 MiB and 3 readers
// fetching LATEST; every byte verified; the status proves readers served
// readers. ctest runs it with the default transports and with UCX_TLS=tcp.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "proc.hpp"
#include "tensorhub/tensorhub.h"

namespace {

uint64_t field(const std::string &line, const std::string &key) {
    size_t at = line.find(key + "=");
    if (at == std::string::npos) return 0;
    return std::stoull(line.substr(at + key.size() + 1));
}

nlohmann::json server_status(const std::string &url) {
    char *out = nullptr;
    EXPECT_EQ(th_server_status_json(url.c_str(), 5000, &out), TH_OK) << th_last_error();
    auto j = nlohmann::json::parse(out ? out : "{}");
    th_free(out);
    return j;
}

}  // namespace

TEST(Cluster, ReadersFetchLatestFromPublisherAndFromEachOther) {
    th_server_config sc;
    th_server_config_init(&sc);
    th_server *server = nullptr;
    ASSERT_EQ(th_server_create(&server, &sc), TH_OK) << th_last_error();
    std::unique_ptr<th_server, void (*)(th_server *)> guard(server, th_server_destroy);
    std::string url = th_server_url(server);
    const std::string shard_kb = std::to_string(64 * 1024);

    Proc pub({TH_TEST_WORKER, "publish", "--server", url, "--name", "publisher", "--model", "policy", "--version", "3",
              "--shards", "2", "--shard-kb", shard_kb, "--tensors", "5", "--chunk-kb", "1024"});
    std::string ready = pub.line();
    ASSERT_EQ(ready.rfind("ready", 0), 0u) << ready;
    uint64_t publisher = field(ready, "worker");

    std::vector<std::unique_ptr<Proc>> readers;
    for (int i = 0; i < 3; ++i)
        readers.push_back(std::make_unique<Proc>(std::vector<std::string>{
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
