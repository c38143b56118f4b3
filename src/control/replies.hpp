// How RpcServer's replies travel (control/rpc.hpp): over tcp:// and ipc://
// on plain sockets, a few threads blocked in one epoll, the one woken by a
// request answering it itself (control/plain_socket.hpp); over other schemes
// (ws://, tls+tcp://) through NNG's REP socket. Either way the messages on
// the wire are NNG's REQ/REP ones, so clients of either kind are answered.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "wire/wire.hpp"

namespace th {

// Produces the reply to one request. Must not throw; runs on the replies'
// threads, possibly several at once.
using ReplyHandler = std::function<wire::Bytes(const uint8_t *data, size_t size)>;

class Replies {
  public:
    // Stops: no handler runs once this returned.
    virtual ~Replies() = default;
    // The URL with the port actually bound.
    virtual const std::string &url() const = 0;
};

// Listens on url ("tcp://host:0" picks a free port) and answers with up to
// `parallel` requests handled at once, several of one connection among them.
// Throws TH_ERR_UNAVAILABLE when the address is in use, TH_ERR_INVALID_ARG
// when url cannot be listened on.
std::unique_ptr<Replies> serve_replies(const std::string &url, ReplyHandler handler, int parallel);

}  // namespace th
