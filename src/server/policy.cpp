#include "server/policy.hpp"

#include <algorithm>
#include <tuple>

namespace th {

namespace {

const std::string *label(const Labels &l, const char *key) {
    auto it = l.find(key);
    return it == l.end() ? nullptr : &it->second;
}

bool same(const Labels &a, const Labels &b, const char *key) {
    const std::string *x = label(a, key), *y = label(b, key);
    return x != nullptr && y != nullptr && *x == *y;
}

std::string dc_of(const Labels &l) {
    const std::string *d = label(l, "dc");
    return d ? *d : std::string();
}

}  // namespace

Distance distance(const Labels &a, const Labels &b) {
    if (dc_of(a) != dc_of(b)) return Distance::OtherDc;
    if (same(a, b, "host")) return Distance::SameHost;
    if (same(a, b, "rack") || same(a, b, "zone")) return Distance::SameRack;
    return Distance::SameDc;
}

std::optional<size_t> choose_source(const Request &req, const std::vector<Candidate> &candidates,
                                    const PolicyConfig &cfg) {
    static const Labels kNone;
    const Labels &me = req.labels ? *req.labels : kNone;
    std::optional<size_t> best;
    std::tuple<int, bool, uint32_t, bool, bool, uint64_t, uint64_t> best_key{};
    for (size_t i = 0; i < candidates.size(); ++i) {
        const Candidate &c = candidates[i];
        if (c.worker_id == req.reader_worker) continue;
        if (std::find(req.exclude.begin(), req.exclude.end(), c.worker_id) != req.exclude.end()) continue;
        if (std::find(req.exclude_replicas.begin(), req.exclude_replicas.end(), c.replica_id) != req.exclude_replicas.end())
            continue;
        if (!c.complete && req.reader_seq != 0 && c.seq >= req.reader_seq) continue;
        auto key = std::make_tuple(static_cast<int>(distance(me, c.labels ? *c.labels : kNone)),
                                   c.active_reads >= cfg.max_readers_per_source, c.active_reads, c.publisher_side,
                                   !c.complete, c.bytes_served, c.seq);
        if (!best || key < best_key) {
            best = i;
            best_key = key;
        }
    }
    return best;
}

}  // namespace th
