// NNG's SP mapping (control/sp_stream.hpp) spoken on plain sockets: what the
// requests to the metadata server and its events travel on over tcp:// and
// ipc://. A request then wakes one thread at each end, the one blocked on
// the socket (the server's handler runs on the thread that read it), where
// NNG hands it from its poller to a task thread to the waiting caller on
// both sides; on an idle machine each such hand-off is a sleeping CPU woken
// (perf/server_load/NOTES.md).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

#include "common/deadline.hpp"
#include "control/sp_stream.hpp"

namespace th::plain {

// A descriptor, closed with the object.
class Fd {
  public:
    Fd() = default;
    explicit Fd(int fd) : fd_(fd) {}
    ~Fd() { reset(); }
    Fd(Fd &&o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
    Fd &operator=(Fd &&o) noexcept {
        if (this != &o) {
            reset();
            fd_ = o.fd_;
            o.fd_ = -1;
        }
        return *this;
    }
    Fd(const Fd &) = delete;
    Fd &operator=(const Fd &) = delete;
    int get() const { return fd_; }
    explicit operator bool() const { return fd_ >= 0; }
    void reset();

  private:
    int fd_ = -1;
};

// What ends the waits of a socket's threads: an eventfd that, once raised,
// stays readable (every wait given it returns).
class Signal {
  public:
    Signal();  // throws TH_ERR_INTERNAL when the kernel has no eventfd to give
    void raise();
    int fd() const { return fd_.get(); }

  private:
    Fd fd_;
};

// Throws TH_ERR_INVALID_ARG for a URL that is not a tcp:// or ipc:// one
// with an address (host names are resolved at each dial).
void check_url(const std::string &url);

// Connects to url (one sp::stream_url accepts) before deadline, without
// blocking past it; a readable `wake` descriptor (-1: none) ends the wait
// too. The socket is non-blocking. On failure returns an empty Fd and sets
// *why (e.g. "Connection refused", "no connection in time", a host name
// that does not resolve). Throws TH_ERR_INVALID_ARG for a malformed URL.
Fd dial(const std::string &url, const Deadline &deadline, int wake, std::string *why);
inline constexpr const char *kNoConnectionInTime = "no connection in time";

// A client's connection attempt, greeting included, gives up after this,
// and a server drops a connection that has not greeted by then.
constexpr uint32_t kGreetingTimeoutMs = 5000;

// A thread of its own (named thread_name) that dials url, greets as `self`
// and hands each connection whose peer greeted as `peer` to serve, again
// once serve returns (the connection is then closed), backing off as NNG's
// dialers do: sp::kFirstRetry doubling to sp::kLastRetry, from the first
// again after a greeted connection. A peer that greets otherwise is warned
// about once, as what listens at url for `what`. Destroying it stops it:
// the dial, greeting or wait in flight ends at once, and so do serve's own
// waits given `wake` (serve's second argument, also wake()).
class Dialer {
  public:
    using Serve = std::function<void(int fd, int wake)>;
    // Throws TH_ERR_INVALID_ARG for a URL check_url refuses.
    Dialer(const std::string &url, const char *thread_name, sp::Protocol self, sp::Protocol peer, const char *what,
           Serve serve);
    ~Dialer();
    Dialer(const Dialer &) = delete;
    Dialer &operator=(const Dialer &) = delete;
    // Readable once stopping.
    int wake() const { return stop_.fd(); }

  private:
    void run(const char *thread_name, sp::Protocol self, sp::Protocol peer, const char *what);
    std::string url_;
    Serve serve_;
    Signal stop_;
    bool warned_ = false;  // about a peer that greets otherwise (once)
    std::thread thread_;   // last: started once the rest is set up
};

// A listening socket (non-blocking); one on an ipc socket file removes the
// file when it closes.
class Listener {
  public:
    Listener() = default;
    Listener(Fd fd, std::string file) : fd_(std::move(fd)), file_(std::move(file)) {}
    ~Listener();
    Listener(Listener &&) noexcept = default;
    Listener &operator=(Listener &&) noexcept = default;
    int get() const { return fd_.get(); }

  private:
    Fd fd_;
    std::string file_;
};

// Listens on url ("tcp://host:0" picks a free port; "tcp://*:p" and
// "tcp://:p" every address) and returns the socket; *bound is
// url with the port actually bound. A stale ipc socket file (nothing accepts
// on it) is replaced. Throws TH_ERR_UNAVAILABLE when the address is in use,
// TH_ERR_INVALID_ARG when it cannot be listened on.
Listener listen(const std::string &url, std::string *bound);

// A server's connections that have not greeted yet, each shut down once
// kGreetingTimeoutMs passed since it was accepted (as NNG's handshake
// timeout does): its next event then ends it. Its timer sits in the
// server's epoll set, tagged with this object and armed once (EPOLLONESHOT);
// the server calls expire() when it fires.
class Ungreeted {
  public:
    explicit Ungreeted(int epoll);  // throws TH_ERR_INTERNAL
    // A connection accepted now.
    void add(int fd);
    // A connection that greeted, or is being dropped (before its descriptor
    // closes): no longer timed.
    void forget(int fd);
    void expire();

  private:
    void arm_next();  // under mu_
    int epoll_;
    Fd timer_;
    std::mutex mu_;
    std::map<int, Clock::time_point> since_;  // when each was accepted
};

// The next connection waiting on a non-blocking listener, greeted as
// `self`; an empty Fd when none is waiting. A failure to accept other than
// that (out of descriptors: the connections stay queued) is warned about
// as happening on url and pauses the caller 100 ms.
Fd accept_greeted(int listener, bool ipc, sp::Protocol self, const std::string &url);

// Until fd is ready for `events` (POLLIN, POLLOUT), `wake` is readable or
// the deadline passes (null: none).
enum class Ready { Yes, Woken, TimedOut };
Ready wait(int fd, short events, int wake, const Deadline *deadline);

// Writes all of data on a non-blocking socket before deadline (null: none)
// unless `wake` becomes readable; false if the connection failed or the
// write was cut short (the connection then carries half a message and is of
// no use).
bool write_all(int fd, const uint8_t *data, size_t size, const Deadline *deadline, int wake = -1);

// Reads exactly size bytes before deadline unless `wake` becomes readable.
bool read_all(int fd, uint8_t *data, size_t size, const Deadline &deadline, int wake = -1);

// Exchanges greetings on a new connection as `self`: true if the other end
// is `peer`. One that is not is warned about once (*warned).
bool greet(int fd, sp::Protocol self, sp::Protocol peer, const Deadline &deadline, int wake, const std::string &url,
           const char *what, bool *warned);

// Bytes arriving on a connection, cut into SP messages.
class Inbox {
  public:
    Inbox(bool ipc, uint64_t max) : ipc_(ipc), max_(max) {}
    enum class Read { More, Closed, Failed };
    // Reads what the non-blocking fd holds now: Closed at the end of the
    // stream, Failed on an error.
    Read read_from(int fd);
    // Takes the next whole message into msg. False when none is whole yet,
    // or when what arrived is not a message (malformed() then says so: the
    // connection is of no use).
    bool next(std::vector<uint8_t> &msg);
    bool malformed() const { return malformed_; }
    // Takes the 8-byte greeting that comes first once it is whole, and says
    // whether it is `peer`'s.
    enum class Greeting { NotYet, Peer, Other };
    Greeting greeting(sp::Protocol peer);

  private:
    void compact();
    bool ipc_;
    uint64_t max_;
    bool malformed_ = false;
    std::vector<uint8_t> buf_;
    size_t start_ = 0;  // what before it was taken already
};

}  // namespace th::plain
