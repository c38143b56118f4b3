// How RpcClient's requests travel (control/rpc.hpp): over tcp:// and ipc://
// on a plain socket that speaks NNG's REQ protocol (control/plain_socket.hpp;
// the calling threads write requests and read replies themselves, and a
// client closes it while late replies may be arriving, which NNG 1.5's
// sockets cannot survive); over other schemes (ws://, tls+tcp://) NNG's REQ
// socket. Either way the messages on the wire are NNG's REQ/REP ones
// (control/replies.hpp: the server's end).
#pragma once

#include <memory>
#include <string>
#include <variant>

#include "common/deadline.hpp"
#include "wire/wire.hpp"

namespace th {

// Why a request got no reply.
struct RequestFailure {
    enum Kind {
        Unreachable,  // not sent: no server connected by the deadline
        NoAnswer,     // sent, not answered by the deadline
        Closed,       // the transport was closed
        Broken,       // anything else (text says what)
    } kind;
    std::string text;
};

class Requests {
  public:
    virtual ~Requests() = default;
    // Whether a server is connected now.
    virtual bool connected() const = 0;
    // Sends one (sealed) request and waits for its reply until deadline.
    // Thread-safe: many may be in flight at once. A request whose
    // connection is lost before its reply is sent again on the next one.
    virtual std::variant<wire::Bytes, RequestFailure> exchange(const wire::Bytes &request, const Deadline &deadline) = 0;
    // Ends every exchange in flight at once, and every later one before it
    // is sent, with RequestFailure::Closed: its caller moved on to another
    // server. Thread-safe.
    virtual void interrupt() = 0;
};

// Dials url in the background, again after every loss: on a plain socket
// where sp::stream_url says so, else through NNG's REQ socket. Throws
// TH_ERR_INVALID_ARG for a URL that cannot be dialled.
std::unique_ptr<Requests> dial_requests(const std::string &url);

}  // namespace th
