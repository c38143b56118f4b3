// The server's Prometheus endpoint reports what happened.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <regex>

#include "harness.hpp"

using namespace th_test;

namespace {

// GET of an http://127.0.0.1:PORT/path URL; the body, or "" on failure.
std::string http_get(const std::string &url) {
    std::smatch m;
    if (!std::regex_match(url, m, std::regex(R"(http://([0-9.]+):([0-9]+)(/.*))"))) return "";
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(std::stoi(m[2])));
    inet_pton(AF_INET, m[1].str().c_str(), &sa.sin_addr);
    timeval tv{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, reinterpret_cast<sockaddr *>(&sa), sizeof sa) != 0) {
        close(fd);
        return "";
    }
    std::string req = "GET " + m[3].str() + " HTTP/1.0\r\nHost: x\r\n\r\n";
    (void)!write(fd, req.data(), req.size());
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
    close(fd);
    size_t body = out.find("\r\n\r\n");
    return body == std::string::npos ? "" : out.substr(body + 4);
}

double sample(const std::string &text, const std::string &series) {
    size_t at = text.find("\n" + series + " ");
    return at == std::string::npos ? -1 : std::stod(text.substr(at + series.size() + 2));
}

}  // namespace

TEST(Metrics, ThePrometheusEndpointReportsCommitsBytesAndLatencies) {
    th_server_config sc;
    th_server_config_init(&sc, sizeof sc);
    sc.metrics_url = "http://127.0.0.1:0";
    th_server *server = nullptr;
    ASSERT_EQ(th_server_create(&server, &sc), TH_OK) << th_last_error();
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
