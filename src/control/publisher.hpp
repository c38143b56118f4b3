// The sending end of the server's event stream: NNG's PUB protocol on plain
// sockets (tcp:// and ipc://, control/plain_socket.hpp), read by
// control/subscriber.hpp or by any NNG SUB socket. Events are hints: a
// subscriber that does not take them loses those that do not fit its queue
// (as NNG's PUB drops them), so publishing never waits for a subscriber.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "control/plain_socket.hpp"

namespace th {

class Publisher {
  public:
    // Bytes queued for one subscriber beyond which its events are dropped.
    static constexpr size_t kMaxQueued = 1 << 20;

    // Listens on url ("tcp://host:0" picks a free port). Throws like
    // plain::listen.
    explicit Publisher(const std::string &url);
    ~Publisher();
    Publisher(const Publisher &) = delete;
    Publisher &operator=(const Publisher &) = delete;

    // The URL with the port actually bound.
    const std::string &url() const { return url_; }

    // Sends message to every subscriber connected (greeted) now, from the
    // caller's thread where its socket takes it at once, else later from
    // the publisher's thread. Thread-safe; never blocks on a subscriber.
    void publish(const std::vector<uint8_t> &message);

    // Events dropped so far for subscribers that did not take them.
    uint64_t dropped() const;

  private:
    struct Subscriber;
    void run();
    void accept_all();
    // Reads what a subscriber sent (its greeting); false once it is of no use.
    bool read_from(Subscriber &s);
    // Under mu_: writes what is queued for s; false if its connection failed.
    bool flush(Subscriber &s);
    // Under mu_: watches s for writability too while it has bytes queued.
    void watch(Subscriber &s, bool out);

    std::string url_;
    bool ipc_ = false;
    plain::Listener listener_;
    plain::Fd epoll_;
    plain::Signal stop_;  // raised once stopping
    std::unique_ptr<plain::Ungreeted> ungreeted_;  // in epoll_
    mutable std::mutex mu_;  // guards what follows
    std::unordered_map<Subscriber *, std::unique_ptr<Subscriber>> subscribers_;
    uint64_t dropped_ = 0;
    std::thread thread_;
};

}  // namespace th
