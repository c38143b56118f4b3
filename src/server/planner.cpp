#include "server/planner.hpp"

#include <algorithm>

#include "common/error.hpp"
#include "common/stripes.hpp"
#include "wire/wire.hpp"

namespace th {

namespace {
// Followers with room a stripe's reader chooses among (the fewest hops wins).
constexpr uint32_t kFollowerChoices = 32;
}  // namespace

ReplicaInfo &Planner::choose(const Request &req, const WorkerInfo &reader, ShardInfo &s, const ReplicaKey &key) const {
    if (ReplicaInfo *chosen = find(req, reader, s)) return *chosen;
    unavailable(req, s, key);
}

ReplicaInfo *Planner::find(const Request &req, const WorkerInfo &reader, ShardInfo &s) const {
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
    return chosen;
}

void Planner::unavailable(const Request &req, const ShardInfo &s, const ReplicaKey &key) const {
    std::vector<const WorkerInfo *> failed;  // live holders this reader failed to read from
    size_t later = 0;                        // live ones it may not read from yet (filling)
    for (const auto &[id, r] : s.replicas) {
        if (!routable(r) || r.worker == req.reader_worker) continue;
        if (excluded(req, candidate(r))) {
            if (std::find(failed.begin(), failed.end(), r.holder) == failed.end()) failed.push_back(r.holder);
        } else {
            later++;
        }
    }
    std::string what = str("model '", key.model, "' version ", key.version, " shard ", key.shard);
    if (failed.empty() && later == 0) fail(TH_ERR_UNAVAILABLE, "no live holder of ", what);
    std::string names;
    for (size_t i = 0; i < std::min<size_t>(failed.size(), 3); ++i)
        names += str(i == 0 ? "" : ", ", "worker ", failed[i]->id, " '", failed[i]->name, "'");
    if (failed.size() > 3) names += ", ...";
    std::string why;
    if (later == 0)
        why = str("every holder of ", what, " failed this reader (", failed.size(), " tried: ", names, ")");
    else if (failed.empty())
        why = str("no holder of ", what, " can serve this reader yet: ", later, " replica(s) still filling may not");
    else
        why = str("no holder of ", what, " can serve this reader yet: ", failed.size(), " failed it (", names, "), ",
                  later, " replica(s) still filling may not serve it yet");
    throw wire::NoSourceYet(TH_ERR_UNAVAILABLE, why);
}

std::vector<Assignment> Planner::plan_stripes(const Request &req, const WorkerInfo &reader, ShardInfo &s,
                                              const ReplicaKey &key, const ReplicaInfo &mine, uint32_t first,
                                              uint32_t count, bool may_defer, uint32_t *home_depth) const {
    uint32_t k = s.stripes;
    // The nearest idle complete holder (it serves every stripe at full
    // speed), and the policy's choice among all complete holders (the last
    // resort for a stripe).
    Request whole = req;
    whole.complete_only = true;
    ReplicaInfo *holder = find(whole, reader, s);
    whole.below_reads = 1;
    ReplicaInfo *idle = find(whole, reader, s);
    // Re-planning its own stripe, a relay only moves up its tree: a parent
    // deeper than itself could be its own descendant.
    uint32_t depth = mine.depth;
    std::vector<Assignment> out;
    uint32_t end = first + count;
    auto [lo, hi] = stripes_touching(s.num_chunks, k, first, end);
    for (uint32_t i = lo; i < hi; ++i) {
        uint32_t a = std::max(first, stripe_begin(s.num_chunks, k, i));
        uint32_t b = std::min(end, stripe_begin(s.num_chunks, k, i + 1));
        bool home = mine.home == static_cast<int32_t>(i);
        Role role;
        ReplicaInfo *src = stripe_source(req, reader, s, idle, holder, i, home, depth, may_defer, out, &role);
        if (src == nullptr) unavailable(req, s, key);
        if (may_defer && !home && (role == Role::Root || role == Role::Follower)) continue;
        if (home) *home_depth = role == Role::Relay ? src->depth + 1 : role == Role::Follower ? kFollowing : 1;
        // A complete source sends a run of stripes as one range; a filling
        // one fills its stripes side by side, so each is a range of its own
        // (one range would wait for the first stripe before the next).
        if (!out.empty() && out.back().source == src && src->complete && out.back().first + out.back().count == a)
            out.back().count += b - a;
        else
            out.push_back({src, a, b - a});
    }
    // Nothing but stripes to leave out (a range without the reader's own):
    // planned at once rather than answered with nothing.
    if (out.empty()) return plan_stripes(req, reader, s, key, mine, first, count, false, home_depth);
    return out;
}

// Relays of a stripe are filed by room (no reader yet, under its room, full),
// then by depth (by load when full): each lookup below starts at a
// class and stops at the first relay that may serve the reader.
ReplicaInfo *Planner::relay(const Request &req, const WorkerInfo &reader, ShardInfo &s, uint32_t stripe, bool home,
                            uint32_t depth, bool first_plan, bool beyond_room) const {
    auto it = s.relays.find({reader.place.dc, stripe});
    if (it == s.relays.end()) return nullptr;
    const auto &filed = it->second;
    uint32_t cap = stripe_room(s.stripes, policy_);
    auto first_of = [&](uint8_t room_class, uint32_t below) -> ReplicaInfo * {
        for (auto f = filed.lower_bound({RelayRank{room_class, 0, 0, 0}, 0});
             f != filed.end() && std::get<0>(f->first) == room_class; ++f) {
            ReplicaInfo &r = s.replicas.at(f->second);
            // Sorted by depth (by load when full): the rest are no better.
            if ((home && r.depth >= depth) || r.holder->active_reads >= below) break;
            // A relay that follows another reader for its own stripe (depth
            // kFollowing and beyond) only serves readers registered after it:
            // whoever it follows registered before it, so no reader waits on
            // itself.
            if (!routable(r) || excluded(req, candidate(r)) || (r.depth >= kFollowing && r.seq >= req.reader_seq)) continue;
            return &r;
        }
        return nullptr;
    };
    // A relay of the stripe takes the shallowest place with room. Readers of
    // another stripe (leaves of this tree) take only a relay nobody reads
    // from yet in their first plan: the places are kept for relays of the
    // stripe planning after them, so that relays fill the top of the tree
    // and leaves its bottom; leaves take the rest when they ask again.
    // Beyond its room (a reader planning again that found no other sender
    // with room), a full relay takes up to twice its room, the least loaded
    // first: a relay sending more for a while beats a chain of followers.
    if (beyond_room) return first_plan ? nullptr : first_of(2, 2 * cap);
    if (home) {
        ReplicaInfo *roomy = first_of(0, cap), *some = first_of(1, cap);
        return !roomy ? some : !some ? roomy : some->depth < roomy->depth ? some : roomy;
    }
    ReplicaInfo *found = first_of(0, cap);
    if (!found && !first_plan) found = first_of(1, cap);
    return found;
}

ReplicaInfo *Planner::follower(const Request &req, const WorkerInfo &reader, ShardInfo &s, uint32_t stripe, bool home,
                               uint32_t depth, uint32_t below, const std::vector<Assignment> &taken) const {
    // Registered before the reader, so followers never form a cycle. For its
    // own stripe, a reader follows only one that has a source for it already
    // (readers ready together would otherwise all wait on the first), and a
    // relay re-planning its own stripe does not follow: readers registered
    // before it may already read that stripe from it.
    if (home && depth != kNoDepth) return nullptr;
    auto it = s.by_load.find(reader.place.dc);
    if (it == s.by_load.end()) return nullptr;
    bool with_room = below != UINT32_MAX;
    ReplicaInfo *best = nullptr;
    uint32_t seen = 0;
    for (const auto &[rank, id] : it->second) {
        if (std::get<1>(rank) >= below) break;  // filed by load: the rest have no more room
        ReplicaInfo &r = s.replicas.at(id);
        bool has_stripe = r.hops[stripe] != 0;
        if (r.complete || ((home || with_room) && !has_stripe) || !routable(r) || excluded(req, candidate(r)) ||
            r.seq >= req.reader_seq)
            continue;
        if (!with_room) return &r;
        // Room is counted in plans made; this plan's own are not in it yet.
        if (std::any_of(taken.begin(), taken.end(), [&](const Assignment &a) { return a.source == &r; })) continue;
        // Sending beyond their own stripe, followers with room would chain
        // behind each other if taken in load order: the fewest hops from a
        // complete holder among the first few wins.
        if (!best || hops_through(r, stripe) < hops_through(*best, stripe)) best = &r;
        if (++seen == kFollowerChoices) break;
    }
    return best;
}

ReplicaInfo *Planner::stripe_source(const Request &req, const WorkerInfo &reader, ShardInfo &s, ReplicaInfo *idle,
                                    ReplicaInfo *holder, uint32_t stripe, bool home, uint32_t depth, bool first_plan,
                                    const std::vector<Assignment> &taken, Role *role) const {
    // An idle complete holder in the reader's datacenter serves every
    // stripe: the plan is one source, as without stripes (late joiners,
    // staggered readers). The publisher's side only when no relay of the
    // stripe can.
    if (idle != nullptr && !idle->publisher && !idle->owned && idle->holder->place.dc == reader.place.dc) {
        *role = Role::Holder;
        return idle;
    }
    if (ReplicaInfo *r = relay(req, reader, s, stripe, home, depth, first_plan, false)) {
        *role = Role::Relay;
        return r;
    }
    // Left out of a first plan either way: no need to look further.
    if (first_plan && !home) {
        *role = Role::Root;
        return holder;
    }
    // Every relay of the stripe is full. Room is tight (N places for N - 1
    // readers, and N - 1 is seldom a multiple of K, so one stripe's relays
    // fall a few places short): a replica with room left, relaying another
    // stripe, sends this one too, as a follower, before a relay is loaded
    // beyond its room (which slows its whole subtree by that much). Then a
    // full relay; then any replica filling ahead of the reader (it reads
    // every stripe, from a complete holder or following in turn) rather than
    // the holder sending the stripe once per reader.
    uint32_t cap = stripe_room(s.stripes, policy_);
    if (ReplicaInfo *r = follower(req, reader, s, stripe, home, depth, cap, taken)) {
        *role = Role::Follower;
        return r;
    }
    if (ReplicaInfo *r = relay(req, reader, s, stripe, home, depth, first_plan, true)) {
        *role = Role::Relay;
        return r;
    }
    if (ReplicaInfo *r = follower(req, reader, s, stripe, home, depth, UINT32_MAX, taken)) {
        *role = Role::Follower;
        return r;
    }
    *role = Role::Root;
    return holder;
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
    using Filed = LoadIndex::value_type;
    auto first_eligible = [&](const LoadIndex &filed) -> const Filed * {
        for (const Filed &f : filed) {
            const ReplicaInfo &r = s.replicas.at(f.second);
            if (routable(r) && eligible(req, candidate(r))) return &f;
        }
        return nullptr;
    };
    const auto &index = req.complete_only ? s.complete_by_load : s.by_load;
    if (auto home = index.find(dc); home != index.end())
        if (const Filed *f = first_eligible(home->second)) return &s.replicas.at(f->second);
    const Filed *best = nullptr;
    for (const auto &[other, filed] : index)
        if (other != dc)
            if (const Filed *f = first_eligible(filed); f && (!best || *f < *best)) best = f;
    return best ? &s.replicas.at(best->second) : nullptr;
}

}  // namespace th
