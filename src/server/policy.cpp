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

// Called for every holder of a shard on each plan: no copies.
const std::string &dc_of(const Labels &l) {
    static const std::string kNone;
    const std::string *d = label(l, "dc");
    return d ? *d : kNone;
}

// "kind", dc and value, unambiguous for any label text.
std::string group_key(const char *kind, const std::string &dc, const std::string *value) {
    if (value == nullptr) return {};
    return std::string(kind) + '\0' + std::to_string(dc.size()) + ':' + dc + *value;
}

}  // namespace

Neighbourhood neighbourhood(const Labels &l) {
    const std::string &dc = dc_of(l);
    return {dc, group_key("host", dc, label(l, "host")), group_key("rack", dc, label(l, "rack")),
            group_key("zone", dc, label(l, "zone"))};
}

Distance distance(const Labels &a, const Labels &b) {
    if (dc_of(a) != dc_of(b)) return Distance::OtherDc;
    if (same(a, b, "host")) return Distance::SameHost;
    if (same(a, b, "rack") || same(a, b, "zone")) return Distance::SameRack;
    return Distance::SameDc;
}

bool excluded(const Request &req, const Candidate &c) {
    return c.worker_id == req.reader_worker ||
           std::find(req.exclude.begin(), req.exclude.end(), c.worker_id) != req.exclude.end() ||
           std::find(req.exclude_replicas.begin(), req.exclude_replicas.end(), c.replica_id) != req.exclude_replicas.end();
}

bool eligible(const Request &req, const Candidate &c) {
    if (excluded(req, c)) return false;
    if (req.complete_only && !c.complete) return false;
    if (c.active_reads >= req.below_reads) return false;
    return c.complete || req.reader_seq == 0 || c.seq < req.reader_seq;
}

uint32_t stripe_room(uint32_t stripes, const PolicyConfig &cfg) {
    return std::max<uint32_t>(1, cfg.max_readers_per_source * stripes / 2);
}

RelayRank relay_rank(const Candidate &c, uint32_t depth, uint32_t stripes, const PolicyConfig &cfg) {
    uint32_t room = stripe_room(stripes, cfg);
    if (c.active_reads >= room) return {2, c.active_reads, depth, c.seq};
    return {c.active_reads == 0 ? 0 : 1, depth, c.active_reads, c.seq};
}

LoadRank load_rank(const Candidate &c, const PolicyConfig &cfg) {
    return {c.active_reads >= cfg.max_readers_per_source, c.active_reads, c.publisher_side, !c.complete, c.bytes_served,
            c.seq};
}

std::optional<size_t> choose_source(const Request &req, const std::vector<Candidate> &candidates,
                                    const PolicyConfig &cfg) {
    static const Labels kNone;
    const Labels &me = req.labels ? *req.labels : kNone;
    std::optional<size_t> best;
    std::pair<int, LoadRank> best_key{};
    for (size_t i = 0; i < candidates.size(); ++i) {
        const Candidate &c = candidates[i];
        if (!eligible(req, c)) continue;
        std::pair<int, LoadRank> key{static_cast<int>(distance(me, c.labels ? *c.labels : kNone)), load_rank(c, cfg)};
        if (!best || key < best_key) {
            best = i;
            best_key = key;
        }
    }
    return best;
}

}  // namespace th
