// The receiving end of the server's event stream. Events are hints: PUB/SUB
// drops messages under load, so users of this class pair it with a query that
// catches up (see Client::wait_for_version).
//
// The server publishes on an NNG PUB socket; this end is not an NNG SUB
// socket but a byte stream that speaks SP as a subscriber itself
// (control/sp_stream.hpp: NNG 1.5's sockets can hang closing while a message
// arrives, and events arrive unasked, at any moment; docs/design.md, "Events").
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "control/sp_stream.hpp"

namespace th {

class Subscriber {
  public:
    using Handler = std::function<void(const uint8_t *data, size_t size)>;
    // Connects to url (tcp:// or ipc://, where the server's PUB socket
    // listens) in the background, again after every loss, and calls handler
    // for every message, on the subscriber's own thread. Throws
    // TH_ERR_INVALID_ARG for a URL it cannot dial.
    Subscriber(const std::string &url, Handler handler);
    ~Subscriber();
    Subscriber(const Subscriber &) = delete;
    Subscriber &operator=(const Subscriber &) = delete;
    const std::string &url() const { return url_; }

  private:
    // One connection: greets, then delivers messages until it fails.
    // Returns true if the greeting was answered (the server was reached).
    bool serve(nng_stream *stream, nng_aio *aio);

    std::string url_;
    Handler handler_;
    bool ipc_framing_ = false;  // IPC's mapping puts a type byte before each length
    bool warned_ = false;       // about a peer that is not a PUB socket (once)
    std::unique_ptr<sp::Dialer> dialer_;
};

}  // namespace th
