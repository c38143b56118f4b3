// The metadata server runtime: the Service behind an RpcServer
// (control/rpc.hpp), a Publisher for events (control/publisher.hpp), and a
// timer thread that expires worker leases. Used by th_server_* and by the
// tensorhub-server binary.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "control/publisher.hpp"
#include "control/rpc.hpp"
#include "server/http_endpoint.hpp"
#include "server/leadership.hpp"
#include "server/service.hpp"

namespace th {

class Server {
  public:
    // token: the cluster token (empty: none); see wire/auth.hpp.
    // http_url: serve GET /metrics, the live page (/) and /api/status there
    // (empty: no HTTP endpoint). etcd: campaign for leadership there and
    // serve only while leading (etcd.endpoints empty: always serve).
    Server(const std::string &listen_url, ServiceConfig cfg, std::string token = "", const std::string &http_url = "",
           LeadershipConfig etcd = {});
    ~Server();
    const std::string &url() const { return rpc_->url(); }
    const std::string &events_url() const { return events_url_; }
    // The bound /metrics URL, or "".
    std::string metrics_url() const { return http_ ? http_->url() + "/metrics" : std::string(); }
    Service &service() { return *service_; }

  private:
    void lease_loop(uint32_t period_ms);
    wire::Bytes answer(const uint8_t *data, size_t size);
    std::string token_;
    std::unique_ptr<Publisher> events_;  // none when listening on a scheme clients do not read events on
    std::string events_url_;
    std::unique_ptr<Service> service_;
    std::unique_ptr<RpcServer> rpc_;
    std::unique_ptr<HttpEndpoint> http_;
    std::unique_ptr<Leadership> leadership_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool stop_ = false;
    std::thread lease_thread_;
};

}  // namespace th
