#include "server/planner.hpp"

#include <algorithm>

#include "common/error.hpp"

namespace th {

ReplicaInfo &Planner::choose(const Request &req, const WorkerInfo &reader, ShardInfo &s, const ReplicaKey &key) const {
    // The policy ranks by distance first, so the best eligible holder on the
    // reader's host, else in its rack or zone, is the best of all; only when
    // there is none does the plan go by load.
    auto group = [&](const std::string &place) -> Group {
        if (place.empty()) return nullptr;
        auto it = s.nearby.find(place);
        return it == s.nearby.end() ? nullptr : &it->second;
    };
    std::vector<Group> same_host, same_rack;
    if (Group g = group(reader.place.host)) same_host.push_back(g);
    for (const std::string *place : {&reader.place.rack, &reader.place.zone})
        if (Group g = group(*place)) same_rack.push_back(g);
    ReplicaInfo *chosen = same_host.empty() ? nullptr : pick(req, same_host);
    if (!chosen && !same_rack.empty()) chosen = pick(req, same_rack);
    if (!chosen) chosen = pick_by_load(req, s, reader.place.dc);
    if (chosen) return *chosen;
    size_t holders = std::count_if(s.replicas.begin(), s.replicas.end(),
                                   [&](auto &kv) { return routable(kv.second) && kv.second.worker != reader.id; });
    if (holders == 0)
        fail(TH_ERR_UNAVAILABLE, "no live holder of model '", key.model, "' version ", key.version, " shard ", key.shard);
    fail(TH_ERR_UNAVAILABLE, "every holder of model '", key.model, "' version ", key.version, " shard ", key.shard,
         " failed this reader (", holders, " tried)");
}

ReplicaInfo *Planner::pick(const Request &req, const std::vector<Group> &groups) const {
    std::vector<ReplicaInfo *> holders;
    std::vector<Candidate> cands;
    for (Group g : groups)
        for (ReplicaInfo *r : *g)
            if (routable(*r)) {
                holders.push_back(r);
                cands.push_back(candidate(*r));
            }
    auto chosen = choose_source(req, cands, policy_);
    return chosen ? holders[*chosen] : nullptr;
}

ReplicaInfo *Planner::pick_by_load(const Request &req, ShardInfo &s, const std::string &dc) const {
    // No holder at SameRack or closer is eligible, so in the reader's own
    // datacenter the first eligible in load order is the policy's choice; only
    // without one does it cross, to the best of each other's first eligible.
    using Filed = std::pair<LoadRank, uint64_t>;
    auto first_eligible = [&](const std::set<Filed> &filed) -> const Filed * {
        for (const Filed &f : filed) {
            const ReplicaInfo &r = s.replicas.at(f.second);
            if (routable(r) && eligible(req, candidate(r))) return &f;
        }
        return nullptr;
    };
    if (auto home = s.by_load.find(dc); home != s.by_load.end())
        if (const Filed *f = first_eligible(home->second)) return &s.replicas.at(f->second);
    const Filed *best = nullptr;
    for (const auto &[other, filed] : s.by_load)
        if (other != dc)
            if (const Filed *f = first_eligible(filed); f && (!best || *f < *best)) best = f;
    return best ? &s.replicas.at(best->second) : nullptr;
}

}  // namespace th
