// The receiving end of the server's event stream. Events are hints: PUB/SUB
// drops messages under load, so users of this class pair it with a query that
// catches up (see Client::wait_for_version).
//
// The server publishes on an NNG PUB socket; this end is not an NNG SUB
// socket but a byte stream (nng_stream) that speaks the SP wire mapping of a
// subscriber itself: the 8-byte greeting, then length-prefixed messages. NNG
// up to 1.5.2 (Debian 12's) cannot close a socket while a message is
// arriving on it: its TCP transport resubmits a read on the closed pipe,
// the read is dropped, and NNG's one reaper thread waits for it forever,
// after which no socket in the process closes and no dialer reconnects
// (fixed in NNG 1.6.0). Events arrive unasked, at any moment, so every
// client's end risked it; a stream that this class reads itself has no
// such state to leave behind (docs/design.md, "Events").
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include <nng/nng.h>

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
    void run();
    // One connection: greets, then delivers messages until it fails.
    // Returns true if the greeting was answered (the server was reached).
    bool serve(nng_stream *stream);
    // Sends or receives (op) all of data on aio_; false when the stream
    // failed or the subscriber stops.
    bool whole(nng_stream *stream, void (*op)(nng_stream *, nng_aio *), void *data, size_t size);

    std::string url_;
    Handler handler_;
    bool ipc_framing_ = false;  // IPC's mapping puts a type byte before each length
    bool warned_ = false;       // about a peer that is not a PUB socket (once)
    nng_stream_dialer *dialer_ = nullptr;
    nng_aio *aio_ = nullptr;  // the thread's one operation at a time; stopped to end it
    std::mutex mu_;
    nng_stream *stream_ = nullptr;  // the connection being read, if any
    std::condition_variable cv_;  // the wait between connection attempts
    bool stop_ = false;
    std::thread thread_;
};

}  // namespace th
