// Source choice: which holder of a shard a reader reads from. Applies the
// policy (policy.hpp) to the catalog's holders of the shard, through its
// indexes: the reader's host first, then its rack or zone, and only when no
// neighbour is eligible the holders in load order. The result is the policy's
// choice among all holders (tests/unit/service_test.cpp checks it).
#pragma once

#include "server/catalog.hpp"

namespace th {

class Planner {
  public:
    explicit Planner(PolicyConfig policy) : policy_(policy) {}

    // The replica of key's shard (s) that reader should read from; throws
    // Error(TH_ERR_UNAVAILABLE) saying why when no holder is eligible.
    ReplicaInfo &choose(const Request &req, const WorkerInfo &reader, ShardInfo &s, const ReplicaKey &key) const;

  private:
    using Group = const std::vector<ReplicaInfo *> *;
    // The policy's choice among the given groups of holders, or nullptr.
    ReplicaInfo *pick(const Request &req, const std::vector<Group> &groups) const;
    // The policy's choice when no holder at SameRack or closer is eligible.
    ReplicaInfo *pick_by_load(const Request &req, ShardInfo &s, const std::string &dc) const;

    PolicyConfig policy_;
};

}  // namespace th
