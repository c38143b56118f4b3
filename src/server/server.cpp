#include "server/server.hpp"

#include "common/deadline.hpp"

namespace th {

Server::Server(const std::string &listen_url, ServiceConfig cfg) : service_(cfg) {
    rpc_ = std::make_unique<RpcServer>(listen_url,
                                       [this](const uint8_t *d, size_t n) { return service_.handle(d, n); });
    uint32_t period = std::max<uint32_t>(cfg.lease_ms / 4, 10);
    lease_thread_ = std::thread([this, period] {
        std::unique_lock lk(mu_);
        while (!cv_.wait_for(lk, std::chrono::milliseconds(period), [this] { return stop_; })) {
            lk.unlock();
            service_.expire(now_ms());
            lk.lock();
        }
    });
}

Server::~Server() {
    {
        std::lock_guard lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    lease_thread_.join();
    rpc_.reset();
}

}  // namespace th
