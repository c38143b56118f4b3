// What a caller and an operator see of a sync: th_sync_stats, the progress
// callback, the fill level a serving reader reports while it fetches, and the
// live page's routes on the server's HTTP endpoint.
#include <map>
#include <sstream>

#include <gtest/gtest.h>

#include "harness.hpp"
#include "threads.hpp"

using namespace th_test;

namespace {

struct ProgressLog {
    std::vector<std::pair<uint64_t, uint64_t>> calls;
    std::thread::id thread;
};

void on_progress(uint64_t done, uint64_t total, void *user_data) {
    auto *log = static_cast<ProgressLog *>(user_data);
    log->calls.push_back({done, total});
    log->thread = std::this_thread::get_id();
}

th_status fetch_with_stats(th_client *c, Shard &s, th_sync_stats *stats, ProgressLog *log = nullptr,
                           th_replica **out = nullptr) {
    th_fetch_config fc;
    th_fetch_config_init(&fc, sizeof fc);
    fc.model = "m";
    fc.stats = stats;
    if (log) {
        fc.progress = on_progress;
        fc.progress_user_data = log;
        fc.progress_interval_ms = 0;  // every chance: the test checks the sequence
    }
    return th_fetch(c, &fc, s.views.data(), s.views.size(), nullptr, out);
}

// The threads of this process, by id, with their names.
std::map<int, std::string> threads() {
    std::map<int, std::string> out;
    for (const th_support::ThreadInfo &t : th_support::threads_of_this_process()) out[t.tid] = t.name;
    return out;
}

}  // namespace

TEST(Observability, StatsSayWhereTheBytesCameFromAndProgressEndsAtTheTotal) {
    th_server *server = start_server();
    std::string url = th_server_url(server);
    th_client *pub = connect(url, "pub"), *first = connect(url, "first"), *second = connect(url, "second");
    const uint64_t total = 3 * (256 << 10);
    Shard w(3, 256 << 10, 1), a(3, 256 << 10), b(3, 256 << 10);

    th_sync_stats ps;
    th_sync_stats_init(&ps, sizeof ps);
    th_replica *pr = nullptr;
    ASSERT_EQ(publish(pub, "m", 1, 0, 1, w, &pr, &ps), TH_OK) << th_last_error();
    EXPECT_EQ(ps.struct_size, sizeof ps);
    EXPECT_EQ(ps.version, 1u);
    EXPECT_EQ(ps.bytes, total);
    EXPECT_EQ(ps.chunks, total / (64 << 10));
    EXPECT_EQ(ps.sources, 0u);
    EXPECT_GT(ps.seconds, 0);
    EXPECT_EQ(ps.gbps, 0) << "a publish moves no bytes";
    EXPECT_EQ(ps.bytes_one_sided, 0u);
    EXPECT_GT(ps.server_seconds, 0) << "the declaration is a round trip";
    EXPECT_LE(ps.server_seconds, ps.seconds);

    // The first reader can only read from the publisher.
    th_sync_stats fs;
    th_sync_stats_init(&fs, sizeof fs);
    ProgressLog log;
    th_replica *ar = nullptr;
    ASSERT_EQ(fetch_with_stats(first, a, &fs, &log, &ar), TH_OK) << th_last_error();
    EXPECT_EQ(fs.version, 1u);
    EXPECT_EQ(fs.bytes, total);
    EXPECT_EQ(fs.chunks, total / (64 << 10));
    EXPECT_EQ(fs.sources, 1u);
    EXPECT_EQ(fs.bytes_from_publisher, total);
    EXPECT_EQ(fs.bytes_from_replicas, 0u);
    EXPECT_EQ(fs.replans, 0u);
    EXPECT_EQ(fs.failed_sources, 0u);
    if (auto one_sided = reads_one_sided()) EXPECT_EQ(fs.bytes_one_sided, *one_sided ? total : 0);
    EXPECT_GT(fs.seconds, 0);
    EXPECT_NEAR(fs.gbps, fs.bytes / fs.seconds / 1e9, 1e-9);
    EXPECT_GT(fs.server_seconds, 0) << "the plan and the end report are round trips";
    EXPECT_LT(fs.server_seconds, fs.seconds);
    ASSERT_FALSE(log.calls.empty());
    EXPECT_EQ(log.calls.back(), std::make_pair(total, total));
    EXPECT_EQ(log.thread, std::this_thread::get_id());
    for (size_t i = 1; i < log.calls.size(); ++i) {
        EXPECT_LE(log.calls[i - 1].first, log.calls[i].first);
        EXPECT_EQ(log.calls[i].second, total);
    }

    // With the publisher about to change its buffers, the second reader reads
    // from the first one's replica.
    ASSERT_EQ(th_replica_begin_mutation(pr), TH_OK) << th_last_error();
    th_sync_stats ss;
    th_sync_stats_init(&ss, sizeof ss);
    ASSERT_EQ(fetch_with_stats(second, b, &ss), TH_OK) << th_last_error();
    EXPECT_EQ(ss.bytes_from_replicas, total);
    EXPECT_EQ(ss.bytes_from_publisher, 0u);
    EXPECT_EQ(ss.sources, 1u);

    th_replica_release(ar);
    th_replica_release(pr);
    th_client_destroy(second);
    th_client_destroy(first);
    th_client_destroy(pub);
    th_server_destroy(server);
}

TEST(Observability, AStatsStructFromAnOlderHeaderIsFilledOnlyAsFarAsItGoes) {
    th_server *server = start_server();
    std::string url = th_server_url(server);
    th_client *pub = connect(url, "pub"), *reader = connect(url, "reader");
    Shard w(1, 64 << 10, 1), got(1, 64 << 10);
    th_replica *pr = nullptr;
    ASSERT_EQ(publish(pub, "m", 1, 0, 1, w, &pr), TH_OK);
    // A caller that knows only struct_size, version and bytes.
    struct {
        th_sync_stats head;
        uint8_t canary[8];
    } small;
    std::memset(&small, 0xab, sizeof small);
    const size_t old_size = offsetof(th_sync_stats, seconds);
    th_sync_stats_init(&small.head, old_size);
    EXPECT_EQ(small.head.struct_size, old_size);
    ASSERT_EQ(fetch_with_stats(reader, got, &small.head), TH_OK) << th_last_error();
    EXPECT_EQ(small.head.bytes, 64u << 10);
    const auto *after = reinterpret_cast<const uint8_t *>(&small.head) + old_size;
    for (size_t i = 0; i < sizeof small - old_size; ++i) ASSERT_EQ(after[i], 0xab) << "written past struct_size at " << i;

    th_sync_stats bad;
    std::memset(&bad, 0, sizeof bad);
    EXPECT_ERROR(fetch_with_stats(reader, got, &bad), TH_ERR_INVALID_ARG, "th_sync_stats_init");
    th_replica_release(pr);
    th_client_destroy(reader);
    th_client_destroy(pub);
    th_server_destroy(server);
}

// A reader that serves while it fetches tells the server how far its replica
// has filled, and the status shows the read in progress.
TEST(Observability, AServingReaderReportsItsFillWhileFetching) {
    th_server *server = start_server();
    std::string url = th_server_url(server);
    th_client *pub = connect(url, "pub");
    Shard w(2, 1 << 20, 1);
    th_replica *pr = nullptr;
    ASSERT_EQ(publish(pub, "m", 1, 0, 1, w, &pr), TH_OK);  // 32 chunks of 64 KiB
    // 32 chunks at 50 ms each: about 1.6 s of fetching to watch.
    Process slow(worker({"fetch", "--server", url, "--name", "slow", "--model", "m", "--shard-kb", "2048", "--tensors", "2"},
                     {"TENSORHUB_FAULT_CHUNK_DELAY_US=50000"}));
    bool partial = eventually(url, [](const nlohmann::json &s) {
        nlohmann::json v = version_status(s, "m", 1);
        if (v.is_null()) return false;
        bool reading = false;
        for (const auto &r : v["reads"]) reading |= r["active"].get<bool>();
        for (const auto &r : v["shards"][0]["replicas"]) {
            uint64_t done = r["chunks_done"];
            if (!r["publisher"].get<bool>() && done > 0 && done < 32 && reading) return true;
        }
        return false;
    });
    EXPECT_TRUE(partial) << server_status(url).dump();
    EXPECT_NE(slow.line(20000).find("ok"), std::string::npos);
    nlohmann::json v = version_status(server_status(url), "m", 1);
    for (const auto &r : v["reads"]) EXPECT_FALSE(r["active"].get<bool>()) << v.dump();
    th_replica_release(pr);
    th_client_destroy(pub);
    th_server_destroy(server);
}

TEST(Observability, TheServerServesTheLivePageAndTheStatusItPolls) {
    th_server *server = start_server(nullptr, true);
    ASSERT_NE(server, nullptr);
    std::string url = th_server_url(server), metrics = th_server_metrics_url(server);
    std::string base = metrics.substr(0, metrics.size() - std::string("/metrics").size());
    th_client *pub = connect(url, "pub");
    Shard w(1, 64 << 10, 1);
    th_replica *pr = nullptr;
    ASSERT_EQ(publish(pub, "m", 7, 0, 1, w, &pr), TH_OK);

    std::string page = http_get(base + "/");
    EXPECT_NE(page.find("<title>tensorhub</title>"), std::string::npos) << page.substr(0, 200);
    EXPECT_NE(page.find("fetch(\"/api/status\""), std::string::npos);
    for (const char *load : {"src=", "href=", "@import", "url("})
        EXPECT_EQ(page.find(load), std::string::npos) << "the page loads nothing: found " << load;

    // /api/status is the document th_status_json gives, up to the clocks, and
    // th_server_status_json reads it there when given the HTTP URL.
    auto api = nlohmann::json::parse(http_get(base + "/api/status"));
    auto rpc = server_status(url);
    auto via_http = server_status(base);
    for (auto *doc : {&api, &rpc, &via_http}) {
        doc->erase("uptime_ms");
        for (auto &wk : (*doc)["workers"]) wk.erase("last_seen_ms_ago");
    }
    EXPECT_EQ(api, rpc);
    EXPECT_EQ(via_http, rpc);
    char *out = nullptr;
    EXPECT_EQ(th_server_status_json("http://127.0.0.1:1", 1000, &out), TH_ERR_UNAVAILABLE) << th_last_error();
    EXPECT_EQ(api["models"][0]["latest"], 7);
    th_replica_release(pr);
    th_client_destroy(pub);
    th_server_destroy(server);
}

// Every thread the library starts says what it does (top -H, perf, gdb):
// "th-" and its job; the rest are UCX's and NNG's own.
TEST(Observability, EveryThreadTheLibraryStartsIsNamed) {
    std::map<int, std::string> before = threads();
    std::map<int, std::string> seen;
    auto look = [&] {
        for (auto &[tid, name] : threads())
            if (!before.count(tid)) seen[tid] = name;
    };
    {
        ServerGuard server;
        th_client *pub = connect(server.url, "pub");
        th_client *reader = connect(server.url, "reader");
        Shard w(2, 1 << 20, 1), r(2, 1 << 20);
        th_replica *pr = nullptr, *rr = nullptr;
        ASSERT_EQ(publish(pub, "m", 1, 0, 1, w, &pr), TH_OK) << th_last_error();
        ASSERT_EQ(fetch(reader, "m", 1, 0, r, nullptr, &rr, 10000, TH_VERIFY_ALL), TH_OK) << th_last_error();
        look();
        th_replica_release(rr);
        th_replica_release(pr);  // the reader's copy retains it; the publisher's spill may start
        look();
        th_client_destroy(reader);
        th_client_destroy(pub);
        look();
    }
    ASSERT_FALSE(seen.empty());
    std::ostringstream unnamed, all;
    for (auto &[tid, name] : seen) {
        all << ' ' << tid << ':' << name;
        bool ours = name.rfind("th-", 0) == 0;
        bool theirs = name == "async" || name.rfind("nng:", 0) == 0;  // UCX's async thread, NNG's
        if (!ours && !theirs) unnamed << ' ' << tid << ':' << name;
    }
    EXPECT_EQ(unnamed.str(), "") << "threads that do not say what they do; all:" << all.str();
}
