// The receiving end of the server's event stream (NNG SUB). Events are hints:
// PUB/SUB drops messages under load, so users of this class pair it with a
// query that catches up (see Client::wait_for_version).
#pragma once

#include <functional>
#include <string>
#include <thread>

#include <nng/nng.h>

namespace th {

class Subscriber {
  public:
    using Handler = std::function<void(const uint8_t *data, size_t size)>;
    // Dials url in the background and calls handler for every message, on the
    // subscriber's own thread.
    Subscriber(const std::string &url, Handler handler);
    ~Subscriber();
    Subscriber(const Subscriber &) = delete;
    Subscriber &operator=(const Subscriber &) = delete;
    const std::string &url() const { return url_; }

  private:
    std::string url_;
    Handler handler_;
    nng_socket sock_ = NNG_SOCKET_INITIALIZER;
    nng_aio *recv_ = nullptr;  // the receive loop's; stopped to end it
    std::thread thread_;
};

}  // namespace th
