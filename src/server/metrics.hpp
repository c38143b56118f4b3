// Server metrics in the Prometheus text format.
#pragma once

#include <array>
#include <vector>
#include <cstdint>
#include <string>

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

}  // namespace th
