// The server's Prometheus endpoint reports what happened.
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
