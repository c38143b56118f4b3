// A client's way to the metadata server in etcd mode: server_url
// "etcd://host:port[,host:port...]/prefix" names etcd, and etcd names the
// leader (server/leadership.hpp). ServerSession asks here whom to talk to,
// first and after the server it used stops answering or stops leading.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "common/deadline.hpp"
#include "control/etcd.hpp"

namespace th {

class FollowLeader {
  public:
    static bool is_etcd_url(const std::string &url) { return url.rfind("etcd://", 0) == 0; }

    // url: "etcd://endpoints/prefix" (prefix default TH_DEFAULT_ETCD_PREFIX);
    // TH_ERR_INVALID_ARG when it is not one.
    FollowLeader(const std::string &url, uint32_t timeout_ms);

    // The leader etcd names, polling until there is one. must_change: wait
    // for a record other than `after` (its server stopped leading); else
    // return the current record after at most a short wait for a change
    // (its server stopped answering, perhaps for a moment only). Fails with
    // TH_ERR_UNAVAILABLE at the deadline.
    LeaderRecord next(const LeaderRecord &after, bool must_change, const Deadline &deadline);
    // The leader etcd names now, if any: one read of etcd (errors as
    // EtcdClient's: TH_ERR_UNAVAILABLE, TH_ERR_TIMEOUT, TH_ERR_PROTOCOL).
    std::optional<LeaderRecord> current();
    const std::string &prefix() const { return prefix_; }

  private:
    FollowLeader(const std::pair<std::string, std::string> &endpoints_prefix, uint32_t timeout_ms);
    std::string prefix_;
    EtcdClient etcd_;
};

}  // namespace th
