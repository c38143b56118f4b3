// etcd mode: metadata servers campaign for leadership and only the leader
// serves. Each server holds an etcd lease; the leader is the one whose lease
// holds <prefix>/leader (its URL and epoch, JSON). A server serves only while
// its lease is surely alive: until one renewal period before the lease could
// have run out at etcd, measured from when it sent the last renewal that
// etcd confirmed. So a leader cut off from etcd stops answering before etcd
// can let another server take its place, and no two leaders ever serve at
// once. <prefix>/epoch holds the newest leader's epoch: each new leader takes
// one above it (and above its own), which fences every earlier leader.
// Clients find the leader in etcd (client/follow_leader.hpp).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "control/etcd.hpp"
#include "server/service.hpp"

namespace th {

struct LeadershipConfig {
    std::string endpoints;      // etcd's, "host:port,...": empty means no etcd
    std::string prefix;         // keys live under it, e.g. "/tensorhub"
    std::string advertise_url;  // what clients dial to reach this server
    uint32_t lease_ms = TH_DEFAULT_ETCD_LEASE_MS;
};

class Leadership {
  public:
    // Starts campaigning for service, which must have await_leadership set.
    // Bad settings (endpoints, prefix, advertise_url) fail TH_ERR_INVALID_ARG.
    Leadership(LeadershipConfig cfg, Service &service);
    // Resigns (the next server is elected at once, not a lease later).
    ~Leadership();

  private:
    void loop();
    // One round: renew (or get) the lease, then campaign or stay leader.
    void round();
    void campaign();
    void stop_leading(const std::string &why);

    LeadershipConfig cfg_;
    Service &service_;
    uint32_t ttl_ms_;     // the lease's TTL (whole seconds, at least 2)
    uint32_t period_ms_;  // between rounds, and the safety margin
    EtcdClient etcd_;
    std::string leader_key_, epoch_key_;
    int64_t lease_ = 0;                  // 0: none
    uint64_t lease_sure_until_ms_ = 0;   // now_ms(): the lease is alive until then
    bool leading_ = false;
    bool warned_ = false;

    std::mutex mu_;
    std::condition_variable cv_;
    bool stop_ = false;
    std::thread thread_;
};

}  // namespace th
