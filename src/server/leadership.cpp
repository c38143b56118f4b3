#include "server/leadership.hpp"

#include <chrono>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/thread_name.hpp"

namespace th {

namespace {

// Wall-clock milliseconds for a now_ms() instant: logs (and the tests that
// read them) compare terms of servers in different processes.
int64_t wall_ms(uint64_t steady_ms) {
    auto wall = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
    return wall - (static_cast<int64_t>(now_ms()) - static_cast<int64_t>(steady_ms));
}

}  // namespace

Leadership::Leadership(LeadershipConfig cfg, Service &service)
    : cfg_(std::move(cfg)),
      service_(service),
      ttl_ms_(std::max<uint32_t>((cfg_.lease_ms + 999) / 1000, 2) * 1000),
      period_ms_(ttl_ms_ / 4),
      etcd_(cfg_.endpoints, period_ms_),
      leader_key_(etcd::leader_key(cfg_.prefix)),
      epoch_key_(etcd::epoch_key(cfg_.prefix)) {
    if (cfg_.prefix.empty() || cfg_.prefix[0] != '/')
        fail(TH_ERR_INVALID_ARG, "etcd prefix '", cfg_.prefix, "' must start with '/'");
    if (cfg_.advertise_url.empty()) fail(TH_ERR_INVALID_ARG, "etcd mode needs the URL clients reach this server at");
    if (cfg_.advertise_url.find("://0.0.0.0") != std::string::npos ||
        cfg_.advertise_url.find("://[::]") != std::string::npos)
        fail(TH_ERR_INVALID_ARG, "listening on ", cfg_.advertise_url,
             ": set advertise_url to the address clients reach this server at");
    thread_ = std::thread([this] {
        name_this_thread("th-leadership");
        loop();
    });
}

Leadership::~Leadership() {
    {
        std::lock_guard lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    if (leading_) stop_leading("resigning");
    if (lease_ != 0) {
        try {
            etcd_.delete_if_lease(leader_key_, lease_);
            etcd_.revoke(lease_);
        } catch (const std::exception &e) {
            TH_LOG(Info, "resigning in etcd failed (the lease runs out instead): ", e.what());
        }
    }
}

void Leadership::loop() {
    std::unique_lock lk(mu_);
    while (!stop_) {
        lk.unlock();
        round();
        lk.lock();
        cv_.wait_for(lk, std::chrono::milliseconds(period_ms_), [this] { return stop_; });
    }
}

void Leadership::round() {
    uint64_t sent = now_ms();
    try {
        if (lease_ == 0) {
            lease_ = etcd_.grant(ttl_ms_ / 1000);
        } else if (etcd_.keep_alive(lease_) <= 0) {
            lease_ = 0;
            lease_sure_until_ms_ = 0;
            if (leading_) stop_leading("the etcd lease ran out");
            return;
        }
        // etcd counts the TTL from when it got the request, after we sent it;
        // one period less covers a renewal in flight.
        lease_sure_until_ms_ = sent + ttl_ms_ - period_ms_;
        if (warned_) TH_LOG(Warn, "etcd answers again");
        warned_ = false;
        if (!leading_) {
            campaign();
        } else if (std::optional<EtcdKv> key = etcd_.get(leader_key_); !key || key->lease != lease_) {
            // Only someone deleting the key by hand gets here (it lives as
            // long as our lease): another server may be elected already.
            stop_leading("the leader key in etcd is no longer ours");
        } else {
            service_.renew(lease_sure_until_ms_);
        }
    } catch (const std::exception &e) {
        if (!warned_) TH_LOG(Warn, "etcd: ", e.what());
        warned_ = true;
    }
    if (leading_ && now_ms() >= lease_sure_until_ms_) stop_leading("no word from etcd in time to keep the lease");
}

void Leadership::campaign() {
    if (std::optional<EtcdKv> leader = etcd_.get(leader_key_)) {
        // Ours from a term that ended here but not in etcd (renewals were
        // late): give it up, so that the next term starts afresh.
        if (leader->lease == lease_) etcd_.delete_if_lease(leader_key_, lease_);
        return;
    }
    std::optional<EtcdKv> last = etcd_.get(epoch_key_);
    uint64_t last_epoch = 0;
    if (last) {
        try {
            last_epoch = std::stoull(last->value);
        } catch (const std::exception &) {
            fail(TH_ERR_PROTOCOL, "etcd key ", epoch_key_, " holds '", last->value, "', not an epoch");
        }
    }
    uint64_t epoch = std::max(last_epoch, service_.epoch()) + 1;
    if (!etcd_.create_guarded(leader_key_, etcd::leader_record_json({cfg_.advertise_url, epoch}), lease_, epoch_key_,
                              last ? last->mod_revision : 0, std::to_string(epoch)))
        return;  // another server was faster
    leading_ = true;
    service_.lead(epoch, lease_sure_until_ms_, /*after_another=*/last.has_value());
    TH_LOG(Info, "leading with epoch ", epoch, " at ", cfg_.advertise_url, " (term starts at ", wall_ms(now_ms()),
           " ms)");
}

void Leadership::stop_leading(const std::string &why) {
    service_.step_down();
    leading_ = false;
    uint64_t served_until = std::min(now_ms(), lease_sure_until_ms_);
    TH_LOG(Warn, "no longer the leader: ", why, " (term ends at ", wall_ms(served_until), " ms)");
}

}  // namespace th
