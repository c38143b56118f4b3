#include "server/server.hpp"

#include "common/deadline.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "common/thread_name.hpp"
#include "control/ping.hpp"
#include "control/sp_stream.hpp"
#include "server/live_page.hpp"
#include "wire/auth.hpp"

namespace th {

namespace {

// Events go to a second port on the same host: "tcp://h:7070" -> "tcp://h:0";
// other transports get a sibling address.
std::string events_listen_url(const std::string &url) {
    if (url.rfind("tcp", 0) == 0) return sp::with_port(url, 0);
    return url + "-events";
}

}  // namespace

Server::Server(const std::string &listen_url, ServiceConfig cfg, std::string token, const std::string &http_url,
               LeadershipConfig etcd)
    : token_(std::move(token)) {
    cfg.await_leadership = !etcd.endpoints.empty();
    if (etcd.endpoints.empty())
        cfg.ping_server = [token = token_](const std::string &url, uint32_t ms) {
            return ping_server(url, token, Deadline(ms));
        };
    // Clients read events over tcp:// and ipc:// only (control/subscriber.hpp):
    // a server on another scheme has no event stream, and its clients ask.
    bool ipc = false;
    if (sp::stream_url(listen_url, &ipc)) {
        events_ = std::make_unique<Publisher>(events_listen_url(listen_url));
        events_url_ = events_->url();
    }
    cfg.events_url = events_url_;
    // Subscribers that fall behind lose events (they catch up by asking), so
    // sending never blocks a request handler.
    cfg.publish_event = [this](const wire::Bytes &ev) {
        if (events_) events_->publish(wire::seal(ev, token_));
    };
    uint32_t period = std::max<uint32_t>(cfg.lease_ms / 4, 10);
    service_ = std::make_unique<Service>(cfg);
    try {
        rpc_ = std::make_unique<RpcServer>(listen_url, [this](const uint8_t *d, size_t n) { return answer(d, n); });
        if (!http_url.empty())
            http_ = std::make_unique<HttpEndpoint>(
                http_url, std::vector<HttpRoute>{
                              {"/metrics", "text/plain; version=0.0.4; charset=utf-8", [this] { return service_->metrics_text(); }},
                              {"/api/status", "application/json", [this] { return service_->status_json(); }},
                              {"/", "text/html; charset=utf-8", [] { return std::string(kLivePage); }},
                          });
        if (!etcd.endpoints.empty()) {
            if (etcd.advertise_url.empty()) etcd.advertise_url = url();
            leadership_ = std::make_unique<Leadership>(etcd, *service_);  // checks the settings
        }
    } catch (...) {
        http_.reset();
        rpc_.reset();
        throw;
    }
    lease_thread_ = std::thread([this, period] {
        name_this_thread("th-lease");
        lease_loop(period);
    });
}

// Requests that fail authentication are answered with an error and nothing
// else: no state, no rkeys. The token itself is never logged.
wire::Bytes Server::answer(const uint8_t *data, size_t size) {
    try {
        size = wire::open(data, size, token_);
    } catch (const Error &e) {
        TH_LOG(Warn, "refused a request: ", e.what());
        wire::Header h;
        h.epoch = service_->epoch();
        return wire::seal(wire::error_reply(h, TH_ERR_AUTH, e.what()), token_);
    }
    return wire::seal(service_->handle(data, size), token_);
}

void Server::lease_loop(uint32_t period_ms) {
    std::unique_lock lk(mu_);
    while (!cv_.wait_for(lk, std::chrono::milliseconds(period_ms), [this] { return stop_; })) {
        lk.unlock();
        service_->expire(now_ms());
        lk.lock();
    }
}

Server::~Server() {
    {
        std::lock_guard lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    lease_thread_.join();
    leadership_.reset();  // resigns first: clients move on while we stop
    http_.reset();
    rpc_.reset();  // no handler runs after this, so no event is sent either
    events_.reset();
}

}  // namespace th
