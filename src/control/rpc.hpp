// Request/reply in NNG's REQ/REP protocol: the client side sends a request
// and waits for the reply under a deadline (control/requests.hpp); the
// server side answers many requests concurrently, calling one handler for
// each (control/replies.hpp). Over tcp:// and ipc:// both ends use plain
// sockets, over other schemes NNG's sockets.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include <nng/nng.h>

#include "common/deadline.hpp"
#include "control/replies.hpp"
#include "wire/wire.hpp"

namespace th {

// Dials url once with a plain connection that carries no request, and
// throws Error(TH_ERR_UNAVAILABLE) saying why if it does not connect within
// timeout_ms (e.g. "Connection refused": nothing listens there). Returns for
// transports a stream dialer does not know: they are left to the requests.
void check_dial(const std::string &url, uint32_t timeout_ms);

class Requests;

class RpcClient {
  public:
    // Starts dialing url in the background (the server may come up later).
    // With a token, requests are sealed and replies must be (wire/auth.hpp).
    explicit RpcClient(const std::string &url, std::string token = "");
    ~RpcClient();
    RpcClient(const RpcClient &) = delete;
    RpcClient &operator=(const RpcClient &) = delete;

    // Sends one request and returns the reply bytes (not yet verified).
    // Throws Error(TH_ERR_UNAVAILABLE) if no server is connected by the
    // deadline (saying why a dial fails, e.g. a refused connection),
    // Error(TH_ERR_TIMEOUT) if it is connected but did not answer.
    // Thread-safe: many calls may be in flight at once.
    wire::Bytes call(const wire::Bytes &request, const Deadline &deadline);

    const std::string &url() const { return url_; }
    bool connected() const;

    // The caller moved on to another server: calls in flight end at once,
    // and later ones fail at once, with TH_ERR_CLOSED (their callers ask the
    // next server). The connection closes with the client, once no call is
    // in flight.
    void abandon();
    bool abandoned() const { return abandoned_.load(); }

  private:
    [[noreturn]] void fail_unreachable() const;
    std::string url_;
    std::string token_;
    std::unique_ptr<Requests> requests_;
    std::atomic<bool> abandoned_{false};
};

class RpcServer {
  public:
    using Handler = ReplyHandler;

    // Listens on url ("tcp://host:0" picks a free port) and serves with
    // `parallel` requests in flight (control/replies.hpp: how).
    RpcServer(const std::string &url, Handler handler, int parallel = 16);
    ~RpcServer();
    RpcServer(const RpcServer &) = delete;
    RpcServer &operator=(const RpcServer &) = delete;

    // The URL with the port actually bound.
    const std::string &url() const;

  private:
    std::unique_ptr<Replies> replies_;
};

// Error text for an NNG error code.
std::string nng_error(int rv);

}  // namespace th
