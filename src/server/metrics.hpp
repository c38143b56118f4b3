// Server metrics in the Prometheus text format, and the HTTP endpoint that
// serves them (NNG's HTTP server).
#pragma once

#include <array>
#include <vector>
#include <cstdint>
#include <functional>
#include <string>

#include <nng/nng.h>
#include <nng/supplemental/http/http.h>

namespace th {

// A Prometheus histogram with fixed upper bounds (seconds).
class Histogram {
  public:
    explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
    void observe(double v);
    // "# TYPE name histogram" and its _bucket/_sum/_count lines.
    void render(std::string &out, const std::string &name, const std::string &help) const;

  private:
    std::vector<double> bounds_;
    std::vector<uint64_t> counts_;  // per bucket, not cumulative; last is +Inf
    double sum_ = 0;
    uint64_t count_ = 0;
};

// Appends one metric family with its samples: "name{labels} value".
void render_family(std::string &out, const std::string &name, const char *type, const std::string &help,
                   const std::vector<std::pair<std::string, double>> &samples);

// GET /metrics on an HTTP URL ("http://0.0.0.0:9090"; port 0 picks one),
// answered by calling render() on an NNG thread.
class MetricsEndpoint {
  public:
    MetricsEndpoint(const std::string &url, std::function<std::string()> render);
    ~MetricsEndpoint();
    MetricsEndpoint(const MetricsEndpoint &) = delete;
    MetricsEndpoint &operator=(const MetricsEndpoint &) = delete;
    // The URL of /metrics with the port actually bound.
    const std::string &url() const { return url_; }

  private:
    static void on_request(nng_aio *aio);
    std::function<std::string()> render_;
    nng_http_server *server_ = nullptr;
    std::string url_;
};

}  // namespace th
