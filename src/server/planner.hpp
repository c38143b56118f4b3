// Source choice: which holders of a shard a reader reads from. Applies the
// policy (policy.hpp) to the catalog's holders of the shard, through its
// indexes: the reader's host first, then its rack or zone, and only when no
// neighbour is eligible the holders in load order. The result is the policy's
// choice among all holders (tests/unit/service_test.cpp checks it).
//
// A reader that serves others is planned stripe by stripe instead
// (docs/design.md, "Fan-out depth"): each stripe of the shard is relayed
// along a tree of its own, and the reader relays one of them, its home.
#pragma once

#include <vector>

#include "server/catalog.hpp"

namespace th {

// A run of chunks a plan routes to one source.
struct Assignment {
    ReplicaInfo *source;
    uint32_t first, count;
};

class Planner {
  public:
    explicit Planner(PolicyConfig policy) : policy_(policy) {}

    // The replica of key's shard (s) that reader should read from; throws
    // Error(TH_ERR_UNAVAILABLE) saying why when no holder is eligible
    // (wire::NoSourceYet when live ones exist, but the reader failed to
    // read from each, or they fill after the reader's own replica).
    ReplicaInfo &choose(const Request &req, const WorkerInfo &reader, ShardInfo &s, const ReplicaKey &key) const;

    // Chunks [first, first + count) of s for a reader whose own replica
    // (mine) relays stripe mine.home: per stripe, an idle complete holder in
    // its datacenter, else the stripe's shallowest relay in the reader's datacenter
    // with room, else a complete holder (the publisher's side, or farther),
    // else a replica filling ahead of the reader. may_defer: a stripe other
    // than home left to a complete holder or a follower is not planned, so
    // that the reader asks again once relays of it exist. Adjacent stripes
    // from one source are one run. *home_depth is set to the reader's depth
    // in its stripe's tree when that stripe was planned (else left alone).
    // Throws Error(TH_ERR_UNAVAILABLE) when some stripe has no source.
    std::vector<Assignment> plan_stripes(const Request &req, const WorkerInfo &reader, ShardInfo &s, const ReplicaKey &key,
                                         const ReplicaInfo &mine, uint32_t first, uint32_t count, bool may_defer,
                                         uint32_t *home_depth) const;

  private:
    using Group = const std::vector<ReplicaInfo *> *;
    enum class Role { Holder, Relay, Root, Follower };
    // The policy's choice, or nullptr when none is eligible.
    ReplicaInfo *find(const Request &req, const WorkerInfo &reader, ShardInfo &s) const;
    [[noreturn]] void unavailable(const Request &req, const ShardInfo &s, const ReplicaKey &key) const;
    // The policy's choice among the given groups of holders, or nullptr.
    ReplicaInfo *pick(const Request &req, const std::vector<Group> &groups) const;
    // The policy's choice when no holder at SameRack or closer is eligible.
    ReplicaInfo *pick_by_load(const Request &req, ShardInfo &s, const std::string &dc) const;
    // The relay of the stripe the reader should read it from within its room
    // (beyond_room: a full one, up to twice its room), or nullptr.
    ReplicaInfo *relay(const Request &req, const WorkerInfo &reader, ShardInfo &s, uint32_t stripe, bool home,
                       uint32_t depth, bool first_plan, bool beyond_room) const;
    // A replica filling ahead of the reader that may send it the stripe,
    // with fewer than `below` active reads (the least loaded; then none
    // already taken in this plan), or nullptr.
    ReplicaInfo *follower(const Request &req, const WorkerInfo &reader, ShardInfo &s, uint32_t stripe, bool home,
                          uint32_t depth, uint32_t below, const std::vector<Assignment> &taken) const;
    // The source of one stripe; idle: the nearest complete holder no reader uses,
    // holder: the policy's choice among complete holders; first_plan: the
    // reader will ask again for what this leaves out.
    ReplicaInfo *stripe_source(const Request &req, const WorkerInfo &reader, ShardInfo &s, ReplicaInfo *idle,
                               ReplicaInfo *holder, uint32_t stripe, bool home, uint32_t depth, bool first_plan,
                               const std::vector<Assignment> &taken, Role *role) const;

    PolicyConfig policy_;
};

}  // namespace th
