#include "server/metrics.hpp"

#include <cstdio>

#include "server/catalog.hpp"
#include "tensorhub/tensorhub.h"

namespace th {

void Histogram::observe(double v) {
    size_t i = 0;
    while (i < bounds_.size() && v > bounds_[i]) ++i;
    counts_[i]++;
    sum_ += v;
    count_++;
}

namespace {
std::string number(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return buf;
}
}  // namespace

void Histogram::render(std::string &out, const std::string &name, const std::string &help) const {
    out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
    uint64_t cumulative = 0;
    for (size_t i = 0; i < bounds_.size(); ++i) {
        cumulative += counts_[i];
        out += name + "_bucket{le=\"" + number(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
    }
    out += name + "_bucket{le=\"+Inf\"} " + std::to_string(count_) + "\n";
    out += name + "_sum " + number(sum_) + "\n" + name + "_count " + std::to_string(count_) + "\n";
}

std::string prometheus_labels(std::initializer_list<std::pair<const char *, std::string>> labels) {
    std::string out = "{";
    for (const auto &[key, value] : labels) {
        if (out.size() > 1) out += ',';
        out += std::string(key) + "=\"";
        for (char c : value) {
            if (c == '"' || c == '\\') out += '\\';
            out += c == '\n' ? std::string("\\n") : std::string(1, c);
        }
        out += '"';
    }
    return out + "}";
}

void render_family(std::string &out, const std::string &name, const char *type, const std::string &help,
                   const std::vector<std::pair<std::string, double>> &samples) {
    out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    for (const auto &[labels, value] : samples) out += name + labels + " " + number(value) + "\n";
}

std::string ServerMetrics::render(const Catalog &catalog) const {
    std::string out;
    render_family(out, "tensorhub_build_info", "gauge", "Version of the tensorhub server.",
                  {{prometheus_labels({{"version", th_version()}}), 1}});
    render_family(out, "tensorhub_workers", "gauge", "Registered workers.", {{"", double(catalog.workers().size())}});
    std::vector<std::pair<std::string, double>> replicas, latest;
    for (const auto &[name, m] : catalog.models()) {
        if (m.latest) latest.push_back({prometheus_labels({{"model", name}}), double(*m.latest)});
        for (const auto &[num, v] : m.versions) {
            std::map<std::string, int> kinds;
            for (const ShardInfo &s : v.shards)
                for (const auto &[id, r] : s.replicas) kinds[replica_kind(r)]++;
            for (const auto &[kind, n] : kinds)
                replicas.push_back(
                    {prometheus_labels({{"model", name}, {"version", std::to_string(num)}, {"kind", kind}}), double(n)});
        }
    }
    render_family(out, "tensorhub_replicas", "gauge", "Replicas per model version and kind.", replicas);
    render_family(out, "tensorhub_latest_version", "gauge", "Newest committed version per model.", latest);
    render_family(out, "tensorhub_versions_committed_total", "counter", "Versions committed.", {{"", double(committed)}});
    render_family(out, "tensorhub_versions_retired_total", "counter", "Versions no holder or requirement keeps.",
                  {{"", double(retired)}});
    std::vector<std::pair<std::string, double>> served;
    for (const auto &[kind, n] : bytes_served_by_kind) served.push_back({prometheus_labels({{"source_kind", kind}}), double(n)});
    render_family(out, "tensorhub_bytes_served_total", "counter", "Bytes readers fetched, by kind of source.", served);
    render_family(out, "tensorhub_registrations_total", "counter",
                  "Workers' Hellos: new workers, and registered ones that said Hello again.",
                  {{prometheus_labels({{"kind", "new"}}), double(registered_new)},
                   {prometheus_labels({{"kind", "again"}}), double(registered_again)}});
    render_family(out, "tensorhub_failures_total", "counter", "Failures seen by the server, by kind.",
                  {{prometheus_labels({{"kind", "source_failed"}}), double(source_failed)},
                   {prometheus_labels({{"kind", "source_stalled"}}), double(source_stalled)},
                   {prometheus_labels({{"kind", "checksum_mismatch"}}), double(checksum_mismatch)},
                   {prometheus_labels({{"kind", "corrupt_replica"}}), double(corrupt_replica)},
                   {prometheus_labels({{"kind", "lease_expired"}}), double(lease_expired)},
                   {prometheus_labels({{"kind", "bad_request"}}), double(bad_requests.load())}});
    plan_seconds.render(out, "tensorhub_plan_seconds", "Time the server spent planning a fetch.");
    fetch_seconds.render(out, "tensorhub_fetch_seconds", "Duration of completed fetches, as readers report them.");
    return out;
}

}  // namespace th
