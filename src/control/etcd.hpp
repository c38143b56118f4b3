// A small etcd v3 client over etcd's JSON gateway (HTTP POST to /v3/...), for
// metadata-server leadership (server/leadership.hpp) and for clients that
// follow the leader (client/follow_leader.hpp). Only what those need: get,
// a create-if-absent transaction, and leases. Keys and values are binary-safe
// strings (base64 on the wire, as the gateway wants).
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace th {

struct EtcdKv {
    std::string value;
    int64_t mod_revision = 0;
    int64_t lease = 0;
};

class EtcdClient {
  public:
    // endpoints: "host:port" or "http://host:port", comma-separated; a request
    // tries each in turn until one answers. timeout_ms bounds each request.
    EtcdClient(const std::string &endpoints, uint32_t timeout_ms);

    std::optional<EtcdKv> get(const std::string &key);
    // Puts key = value under lease if key does not exist and guard_key was
    // last modified at guard_revision (0: guard_key does not exist), and sets
    // guard_key = guard_value in the same transaction. Returns whether it did.
    bool create_guarded(const std::string &key, const std::string &value, int64_t lease, const std::string &guard_key,
                        int64_t guard_revision, const std::string &guard_value);
    // Deletes key if it is held under lease (a leader resigning).
    void delete_if_lease(const std::string &key, int64_t lease);

    // A lease of ttl_s seconds; returns its ID.
    int64_t grant(int64_t ttl_s);
    // Renews a lease; returns its remaining TTL in seconds, 0 when it is gone.
    int64_t keep_alive(int64_t lease);
    void revoke(int64_t lease);

    const std::vector<std::string> &endpoints() const { return endpoints_; }

  private:
    // POSTs body to path at the first endpoint that answers; returns the reply.
    std::string post(const std::string &path, const std::string &body);

    std::vector<std::string> endpoints_;  // "http://host:port"
    std::atomic<size_t> next_{0};         // the endpoint that answered last (calls may overlap)
    uint32_t timeout_ms_;
};

// What tensorhub keeps in etcd under a cluster's prefix: the leader's
// record at <prefix>/leader (server/leadership.hpp), the newest epoch at
// <prefix>/epoch.
struct LeaderRecord {
    std::string url;
    uint64_t epoch = 0;
    bool operator==(const LeaderRecord &) const = default;
};

// The pieces, exposed for tests and the fuzzer. Each parse_* throws
// TH_ERR_PROTOCOL on a reply that is not what etcd sends.
namespace etcd {
std::string base64_encode(const std::string &in);
std::string base64_decode(const std::string &in);  // TH_ERR_PROTOCOL on bad input
std::vector<std::string> parse_endpoints(const std::string &endpoints);  // TH_ERR_INVALID_ARG
std::optional<EtcdKv> parse_range_reply(const std::string &json);
bool parse_txn_reply(const std::string &json);
int64_t parse_grant_reply(const std::string &json);
int64_t parse_keep_alive_reply(const std::string &json);
inline std::string leader_key(const std::string &prefix) { return prefix + "/leader"; }
inline std::string epoch_key(const std::string &prefix) { return prefix + "/epoch"; }
std::string leader_record_json(const LeaderRecord &r);
LeaderRecord parse_leader_record(const std::string &json);
}  // namespace etcd

}  // namespace th
