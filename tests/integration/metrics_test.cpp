// The server's Prometheus endpoint reports what happened, and a client says
// how long its calls waited for the server.
#include <gtest/gtest.h>

#include "harness.hpp"

using namespace th_test;

namespace {

double sample(const std::string &text, const std::string &series) {
    size_t at = text.find("\n" + series + " ");
    return at == std::string::npos ? -1 : std::stod(text.substr(at + series.size() + 2));
}

}  // namespace

TEST(Metrics, ThePrometheusEndpointReportsCommitsBytesAndLatencies) {
    th_server *server = start_server(nullptr, true);
    ASSERT_NE(server, nullptr);
    std::string url = th_server_url(server), metrics = th_server_metrics_url(server);
    ASSERT_EQ(metrics.rfind("http://127.0.0.1:", 0), 0u) << metrics;

    th_client *pub = connect(url, "pub"), *reader = connect(url, "reader");
    Shard w(2, 256 << 10, 1), got(2, 256 << 10);
    th_replica *r = nullptr;
    ASSERT_EQ(publish(pub, "m", 1, 0, 1, w, &r), TH_OK);
    ASSERT_EQ(fetch(reader, "m", TH_LATEST, 0, got), TH_OK) << th_last_error();

    std::string text = http_get(metrics);
    EXPECT_NE(text.find("tensorhub_build_info{version=\"" + std::string(th_version()) + "\"} 1"), std::string::npos) << text;
    EXPECT_EQ(sample(text, "tensorhub_workers"), 2);
    EXPECT_EQ(sample(text, "tensorhub_versions_committed_total"), 1);
    EXPECT_EQ(sample(text, "tensorhub_latest_version{model=\"m\"}"), 1);
    EXPECT_EQ(sample(text, "tensorhub_replicas{model=\"m\",version=\"1\",kind=\"publisher\"}"), 1);
    EXPECT_EQ(sample(text, "tensorhub_bytes_served_total{source_kind=\"publisher\"}"), 2 * (256 << 10));
    EXPECT_EQ(sample(text, "tensorhub_plan_seconds_count"), 1);
    EXPECT_EQ(sample(text, "tensorhub_fetch_seconds_count"), 1);
    EXPECT_GT(sample(text, "tensorhub_fetch_seconds_sum"), 0);

    th_replica_release(r);
    th_client_destroy(reader);
    th_client_destroy(pub);
    th_server_destroy(server);
}

// A fetch's stats say how long it waited for the server: here a server that
// takes 300 ms to answer each plan.
TEST(Metrics, AFetchsStatsSayHowLongItWaitedForTheServer) {
    constexpr double kDelay = 0.3;
    ServerProc server(false, {"TENSORHUB_FAULT_PLAN_ANSWER_DELAY_US=300000"});
    th_client *pub = connect(server.url, "pub"), *reader = connect(server.url, "reader");
    Shard w(2, 256 << 10, 1), got(2, 256 << 10);

    th_sync_stats ps;
    th_sync_stats_init(&ps, sizeof ps);
    th_replica *r = nullptr;
    ASSERT_EQ(publish(pub, "m", 1, 0, 1, w, &r, &ps), TH_OK) << th_last_error();
    EXPECT_GT(ps.server_seconds, 0);
    EXPECT_LE(ps.server_seconds, ps.seconds);

    th_sync_stats fs;
    th_sync_stats_init(&fs, sizeof fs);
    th_fetch_config fc;
    th_fetch_config_init(&fc, sizeof fc);
    fc.model = "m";
    fc.stats = &fs;
    ASSERT_EQ(th_fetch(reader, &fc, got.views.data(), got.views.size(), nullptr, nullptr), TH_OK) << th_last_error();
    EXPECT_EQ(got.first_wrong(1, 0), -1);
    EXPECT_EQ(fs.replans, 0u);
    EXPECT_GE(fs.server_seconds, kDelay) << "one plan, answered " << kDelay << " s late";
    EXPECT_LE(fs.server_seconds, fs.seconds);

    th_replica_release(r);
    th_client_destroy(reader);
    th_client_destroy(pub);
}
