#include "client/follow_leader.hpp"

#include <thread>

#include "common/error.hpp"
#include "common/log.hpp"
#include "tensorhub/tensorhub.h"

namespace th {

namespace {

constexpr uint32_t kPollMs = 100;
// Without must_change: how long a change of leader is waited for before the
// same server is tried again.
constexpr int32_t kSameLeaderWaitMs = 500;

// "etcd://endpoints/prefix" -> endpoints, prefix (TH_DEFAULT_ETCD_PREFIX if none).
std::pair<std::string, std::string> parse_url(const std::string &url) {
    std::string rest = url.substr(std::string("etcd://").size());
    size_t slash = std::min(rest.find('/'), rest.size());
    if (slash == 0)
        fail(TH_ERR_INVALID_ARG, "'", url, "' names no etcd endpoint (etcd://host:port[,host:port...][/prefix])");
    std::string prefix = rest.substr(slash);
    while (prefix.size() > 1 && prefix.back() == '/') prefix.pop_back();
    return {rest.substr(0, slash), prefix.empty() || prefix == "/" ? TH_DEFAULT_ETCD_PREFIX : prefix};
}

}  // namespace

FollowLeader::FollowLeader(const std::string &url, uint32_t timeout_ms)
    : FollowLeader(parse_url(url), timeout_ms) {}

FollowLeader::FollowLeader(const std::pair<std::string, std::string> &endpoints_prefix, uint32_t timeout_ms)
    : prefix_(endpoints_prefix.second),
      etcd_(endpoints_prefix.first, std::clamp<uint32_t>(timeout_ms / 4, 100, 2000)) {}

LeaderRecord FollowLeader::next(const LeaderRecord &after, bool must_change, const Deadline &deadline) {
    Deadline patience = must_change ? deadline : deadline.capped(kSameLeaderWaitMs);
    std::string last = "etcd names no leader yet";
    for (;;) {
        try {
            if (std::optional<LeaderRecord> named = current()) {
                const LeaderRecord &r = *named;
                if (!(r == after)) return r;
                if (patience.expired() && !must_change) return r;
                last = str("etcd still names ", r.url, " (epoch ", r.epoch, ")");
            }
        } catch (const Error &e) {
            if (e.code() != TH_ERR_UNAVAILABLE && e.code() != TH_ERR_TIMEOUT && e.code() != TH_ERR_PROTOCOL) throw;
            last = e.what();
        }
        if (deadline.expired())
            fail(TH_ERR_UNAVAILABLE, "no tensorhub server leads under ", prefix_, " in etcd at ",
                 etcd_.endpoints().front(), " (", last, ")");
        std::this_thread::sleep_for(std::chrono::milliseconds(std::min<int32_t>(kPollMs, deadline.remaining_ms())));
    }
}

std::optional<LeaderRecord> FollowLeader::current() {
    std::optional<EtcdKv> kv = etcd_.get(etcd::leader_key(prefix_));
    if (!kv) return std::nullopt;
    return etcd::parse_leader_record(kv->value);
}

}  // namespace th
