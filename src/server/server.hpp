// The metadata server runtime: the Service behind an NNG REP socket, plus a
// timer thread that expires worker leases. Used by th_server_* and by the
// tensorhub-server binary.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "control/rpc.hpp"
#include "server/service.hpp"

namespace th {

class Server {
  public:
    Server(const std::string &listen_url, ServiceConfig cfg);
    ~Server();
    const std::string &url() const { return rpc_->url(); }
    Service &service() { return service_; }

  private:
    void lease_loop();
    Service service_;
    std::unique_ptr<RpcServer> rpc_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool stop_ = false;
    std::thread lease_thread_;
};

}  // namespace th
