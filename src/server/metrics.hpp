// The server's metrics and their Prometheus text (GET /metrics): counters
// the Service keeps, histograms, and gauges read from the catalog.
#pragma once

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace th {

class Catalog;

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

// A label set, {k="v",...}, with each value escaped as the text format asks
// (backslash, double quote, newline).
std::string prometheus_labels(std::initializer_list<std::pair<const char *, std::string>> labels);

// Appends one metric family with its samples: "name{labels} value".
void render_family(std::string &out, const std::string &name, const char *type, const std::string &help,
                   const std::vector<std::pair<std::string, double>> &samples);

// What the server counts. Changed under the Service's lock, except
// bad_requests, counted where a request is refused before it is read.
struct ServerMetrics {
    uint64_t committed = 0, retired = 0, source_failed = 0, source_stalled = 0, lease_expired = 0;
    // Readers' reports of chunks not matching their checksums, and replicas
    // their holders then found corrupt (and withdrew).
    uint64_t checksum_mismatch = 0, corrupt_replica = 0;
    // Hellos: from workers we did not know, and from workers still registered
    // (whose replicas are forgotten until they declare them again).
    uint64_t registered_new = 0, registered_again = 0;
    std::atomic<uint64_t> bad_requests{0};
    std::map<std::string, uint64_t> bytes_served_by_kind;  // by replica_kind()
    Histogram plan_seconds{{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05}};
    Histogram fetch_seconds{{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}};

    // Every family in the Prometheus text format: these, and the gauges of
    // the catalog (workers, replicas, latest versions).
    std::string render(const Catalog &catalog) const;
};

}  // namespace th
