// The receiving end of the server's event stream (control/publisher.hpp).
// Events are hints: PUB/SUB drops messages under load, so users of this
// class pair it with a query that catches up (see Client::wait_for_version).
//
// It speaks NNG's SP protocol as a subscriber itself on a plain socket
// (control/plain_socket.hpp), so it reads the server's publisher and an NNG
// PUB socket alike; not an NNG SUB socket: NNG 1.5's sockets can hang
// closing while a message arrives, and events arrive unasked, at any moment
// (docs/design.md, "Events").
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "control/plain_socket.hpp"

namespace th {

class Subscriber {
  public:
    using Handler = std::function<void(const uint8_t *data, size_t size)>;
    // Connects to url (tcp:// or ipc://, where the server publishes) in the
    // background, again after every loss, and calls handler for every
    // message, on the subscriber's own thread. Throws TH_ERR_INVALID_ARG for
    // a URL it cannot dial.
    Subscriber(const std::string &url, Handler handler);
    // Stops: a wait in flight ends at once.
    ~Subscriber();
    Subscriber(const Subscriber &) = delete;
    Subscriber &operator=(const Subscriber &) = delete;
    const std::string &url() const { return url_; }

  private:
    // One greeted connection: delivers messages until it fails (or wake is
    // readable).
    void serve(int fd, int wake);

    std::string url_;
    Handler handler_;
    bool ipc_framing_ = false;  // IPC's mapping puts a type byte before each length
    std::unique_ptr<plain::Dialer> dialer_;  // last: stopped before the rest goes
};

}  // namespace th
