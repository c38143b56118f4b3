#include "control/plain_socket.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <memory>
#include <thread>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/thread_name.hpp"

namespace th::plain {

namespace {

// Where a URL points: one or more socket addresses to try in turn.
struct Address {
    int family = AF_UNSPEC;
    sockaddr_storage addr{};
    socklen_t len = 0;
};

struct Parsed {
    std::vector<Address> addresses;
    bool tcp = false;
};

// ipc://path, unix://path: a socket file; abstract://name: Linux's abstract
// namespace (a name, no file).
Address unix_address(const std::string &url, const std::string &rest, bool abstract) {
    Address a;
    sockaddr_un un{};
    un.sun_family = AF_UNIX;
    const size_t room = sizeof un.sun_path - (abstract ? 1 : 0) - 1;
    if (rest.empty() || rest.size() > room) fail(TH_ERR_INVALID_ARG, "'", url, "': the socket path is empty or too long");
    std::memcpy(un.sun_path + (abstract ? 1 : 0), rest.data(), rest.size());
    a.family = AF_UNIX;
    a.len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + (abstract ? 1 : 0) + rest.size() + (abstract ? 0 : 1));
    std::memcpy(&a.addr, &un, sizeof un);
    return a;
}

// The addresses url names; with `why` a name that does not resolve is not
// thrown but said there (a dial tries again later). Without `resolve` only
// the URL's form is checked.
Parsed parse(const std::string &url, bool passive, std::string *why = nullptr, bool resolve = true) {
    Parsed p;
    const sp::StreamScheme *scheme = sp::stream_scheme(url);
    if (scheme == nullptr) fail(TH_ERR_INVALID_ARG, "'", url, "' is not a tcp:// or ipc:// URL");
    std::string rest = url.substr(std::strlen(scheme->prefix));
    if (scheme->ipc) {
        p.addresses.push_back(unix_address(url, rest, scheme->abstract));
        return p;
    }
    const int family = scheme->ip_version == 4 ? AF_INET : scheme->ip_version == 6 ? AF_INET6 : AF_UNSPEC;
    p.tcp = true;
    size_t colon = rest.rfind(':');
    if (colon == std::string::npos || colon + 1 == rest.size())
        fail(TH_ERR_INVALID_ARG, "'", url, "' has no port (tcp://host:port)");
    std::string host = rest.substr(0, colon), port = rest.substr(colon + 1);
    if (port.size() > 5 || !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
        std::stoul(port) > 65535)
        fail(TH_ERR_INVALID_ARG, "'", url, "': '", port, "' is not a port number");
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    bool any = host.empty() || host == "*";
    if (any && !passive) fail(TH_ERR_INVALID_ARG, "'", url, "' names no host to connect to");
    if (!resolve) return p;
    addrinfo hints{};
    hints.ai_family = family;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
    addrinfo *found = nullptr;
    if (int rv = getaddrinfo(any ? nullptr : host.c_str(), port.c_str(), &hints, &found); rv != 0) {
        if (why == nullptr) fail(TH_ERR_INVALID_ARG, "'", url, "': ", gai_strerror(rv));
        *why = gai_strerror(rv);
        return p;
    }
    std::unique_ptr<addrinfo, void (*)(addrinfo *)> owned(found, freeaddrinfo);
    for (addrinfo *ai = found; ai != nullptr; ai = ai->ai_next) {
        Address a;
        a.family = ai->ai_family;
        a.len = ai->ai_addrlen;
        std::memcpy(&a.addr, ai->ai_addr, ai->ai_addrlen);
        p.addresses.push_back(a);
    }
    // Listening on every address: one IPv4 socket, as NNG's tcp://:port does.
    if (any && passive)
        std::stable_partition(p.addresses.begin(), p.addresses.end(), [](const Address &a) { return a.family == AF_INET; });
    return p;
}

// Requests and replies are small and each waited for: sent at once.
void no_delay(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

Fd open_socket(const Address &a) {
    Fd fd(::socket(a.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (fd && a.family != AF_UNIX) no_delay(fd.get());
    return fd;
}

int poll_timeout(const Deadline *deadline) { return deadline == nullptr ? -1 : deadline->remaining_ms(); }

}  // namespace

void Fd::reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
}

Signal::Signal() : fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    if (!fd_) fail(TH_ERR_INTERNAL, "eventfd: ", std::strerror(errno));
}

void Signal::raise() {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(fd_.get(), &one, sizeof one);
}

Ungreeted::Ungreeted(int epoll) : epoll_(epoll), timer_(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLONESHOT;
    ev.data.ptr = this;
    if (!timer_ || epoll_ctl(epoll_, EPOLL_CTL_ADD, timer_.get(), &ev) != 0)
        fail(TH_ERR_INTERNAL, "cannot set up a timer: ", std::strerror(errno));
}

void Ungreeted::add(int fd) {
    std::lock_guard lk(mu_);
    since_[fd] = Clock::now();
    if (since_.size() == 1) arm_next();
}

void Ungreeted::forget(int fd) {
    std::lock_guard lk(mu_);
    since_.erase(fd);
}

void Ungreeted::expire() {
    uint64_t fired = 0;
    [[maybe_unused]] ssize_t n = ::read(timer_.get(), &fired, sizeof fired);
    std::lock_guard lk(mu_);
    const auto late = Clock::now() - std::chrono::milliseconds(kGreetingTimeoutMs);
    for (auto it = since_.begin(); it != since_.end();) {
        if (it->second > late) {
            ++it;
            continue;
        }
        ::shutdown(it->first, SHUT_RDWR);
        it = since_.erase(it);
    }
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLONESHOT;
    ev.data.ptr = this;
    epoll_ctl(epoll_, EPOLL_CTL_MOD, timer_.get(), &ev);
    if (!since_.empty()) arm_next();
}

void Ungreeted::arm_next() {
    Clock::time_point first = Clock::time_point::max();
    for (const auto &[fd, at] : since_) first = std::min(first, at);
    auto in = first + std::chrono::milliseconds(kGreetingTimeoutMs) - Clock::now();
    auto ns = std::max<int64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(in).count(), 1);
    itimerspec when{};
    when.it_value.tv_sec = static_cast<time_t>(ns / 1000000000);
    when.it_value.tv_nsec = static_cast<long>(ns % 1000000000);
    timerfd_settime(timer_.get(), 0, &when, nullptr);
}

Fd accept_greeted(int listener, bool ipc, sp::Protocol self, const std::string &url) {
    uint8_t greeting[8];
    sp::greeting(self, greeting);
    for (;;) {
        Fd fd(accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
        if (!fd) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                TH_LOG(Warn, "cannot accept a connection on ", url, ": ", std::strerror(errno));
                std::this_thread::sleep_for(std::chrono::milliseconds(100));
            }
            return {};
        }
        if (!ipc) no_delay(fd.get());
        // A new socket takes 8 bytes at once; one that does not is gone.
        if (::send(fd.get(), greeting, sizeof greeting, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof greeting)) return fd;
    }
}

Ready wait(int fd, short events, int wake, const Deadline *deadline) {
    for (;;) {
        if (deadline != nullptr && deadline->expired()) return Ready::TimedOut;
        pollfd fds[2] = {{fd, events, 0}, {wake, POLLIN, 0}};
        int n = ::poll(fds, wake >= 0 ? 2 : 1, poll_timeout(deadline));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return Ready::Yes;  // the next read or write says what failed
        if (wake >= 0 && (fds[1].revents & POLLIN)) return Ready::Woken;
        if (fds[0].revents != 0) return Ready::Yes;
    }
}

void check_url(const std::string &url) {
    parse(url, false, nullptr, /*resolve=*/false);
}

Fd dial(const std::string &url, const Deadline &deadline, int wake, std::string *why) {
    *why = "no address";
    Parsed p = parse(url, false, why);
    for (const Address &a : p.addresses) {
        Fd fd = open_socket(a);
        if (!fd) {
            *why = std::strerror(errno);
            continue;
        }
        int rv = ::connect(fd.get(), reinterpret_cast<const sockaddr *>(&a.addr), a.len);
        if (rv != 0 && (errno == EINPROGRESS || errno == EAGAIN)) {
            Ready r = wait(fd.get(), POLLOUT, wake, &deadline);
            if (r != Ready::Yes) {
                *why = r == Ready::Woken ? "stopped" : kNoConnectionInTime;
                return {};
            }
            int err = 0;
            socklen_t len = sizeof err;
            getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
            rv = err == 0 ? 0 : -1;
            errno = err;
        }
        if (rv == 0) return fd;
        *why = std::strerror(errno);
    }
    return {};
}

Dialer::Dialer(const std::string &url, const char *thread_name, sp::Protocol self, sp::Protocol peer,
               const char *what, Serve serve)
    : url_(url), serve_(std::move(serve)) {
    check_url(url);
    thread_ = std::thread([=, this] { run(thread_name, self, peer, what); });
}

Dialer::~Dialer() {
    stop_.raise();
    thread_.join();
}

void Dialer::run(const char *thread_name, sp::Protocol self, sp::Protocol peer, const char *what) {
    name_this_thread(thread_name);
    auto retry = sp::kFirstRetry;
    for (;;) {
        std::string why;
        Fd fd = dial(url_, Deadline(kGreetingTimeoutMs), wake(), &why);
        if (fd && greet(fd.get(), self, peer, Deadline(kGreetingTimeoutMs), wake(), url_, what, &warned_)) {
            serve_(fd.get(), wake());
            retry = sp::kFirstRetry;
        }
        fd.reset();
        Deadline next(static_cast<uint32_t>(retry.count()));
        if (wait(wake(), POLLIN, -1, &next) == Ready::Yes) return;
        retry = std::min(retry * 2, sp::kLastRetry);
    }
}

Listener::~Listener() {
    if (!file_.empty() && fd_) ::unlink(file_.c_str());
}

Listener listen(const std::string &url, std::string *bound) {
    Parsed p = parse(url, true);
    int code = EINVAL;
    for (const Address &a : p.addresses) {
        Fd fd = open_socket(a);
        if (!fd) {
            code = errno;
            continue;
        }
        if (p.tcp) {
            int one = 1;
            setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        }
        const auto *sa = reinterpret_cast<const sockaddr *>(&a.addr);
        int rv = ::bind(fd.get(), sa, a.len);
        const auto *un = reinterpret_cast<const sockaddr_un *>(&a.addr);
        if (rv != 0 && errno == EADDRINUSE && a.family == AF_UNIX && un->sun_path[0] != '\0') {
            // A socket file left by a process that ended: nothing accepts on it.
            std::string ignored;
            if (!dial(url, Deadline(100), -1, &ignored)) {
                ::unlink(un->sun_path);
                rv = ::bind(fd.get(), sa, a.len);
            } else {
                errno = EADDRINUSE;
            }
        }
        if (rv != 0 || ::listen(fd.get(), SOMAXCONN) != 0) {
            code = errno;
            continue;
        }
        *bound = url;
        if (p.tcp) {
            sockaddr_storage at{};
            socklen_t len = sizeof at;
            getsockname(fd.get(), reinterpret_cast<sockaddr *>(&at), &len);
            int port = ntohs(at.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6 *>(&at)->sin6_port
                                                     : reinterpret_cast<sockaddr_in *>(&at)->sin_port);
            *bound = sp::with_port(url, port);
        }
        const bool file = a.family == AF_UNIX && un->sun_path[0] != '\0';
        return Listener(std::move(fd), file ? std::string(un->sun_path) : std::string());
    }
    fail(code == EADDRINUSE ? TH_ERR_UNAVAILABLE : TH_ERR_INVALID_ARG, "cannot listen on '", url, "': ",
         code == EADDRINUSE ? "Address in use" : std::strerror(code));
}

bool write_all(int fd, const uint8_t *data, size_t size, const Deadline *deadline, int wake) {
    while (size > 0) {
        ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
        if (n > 0) {
            data += n;
            size -= static_cast<size_t>(n);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
        if (wait(fd, POLLOUT, wake, deadline) != Ready::Yes) return false;
    }
    return true;
}

bool read_all(int fd, uint8_t *data, size_t size, const Deadline &deadline, int wake) {
    while (size > 0) {
        ssize_t n = ::recv(fd, data, size, 0);
        if (n > 0) {
            data += n;
            size -= static_cast<size_t>(n);
            continue;
        }
        if (n == 0) return false;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return false;
        if (wait(fd, POLLIN, wake, &deadline) != Ready::Yes) return false;
    }
    return true;
}

bool greet(int fd, sp::Protocol self, sp::Protocol peer, const Deadline &deadline, int wake, const std::string &url,
           const char *what, bool *warned) {
    uint8_t mine[8], theirs[8];
    sp::greeting(self, mine);
    return write_all(fd, mine, sizeof mine, &deadline, wake) && read_all(fd, theirs, sizeof theirs, deadline, wake) &&
           sp::greeted_by(theirs, peer, url, what, warned);
}

Inbox::Read Inbox::read_from(int fd) {
    uint8_t step[16 * 1024];
    for (;;) {
        ssize_t n = ::recv(fd, step, sizeof step, 0);
        if (n > 0) {
            compact();
            buf_.insert(buf_.end(), step, step + n);
            if (static_cast<size_t>(n) < sizeof step) return Read::More;
            continue;
        }
        if (n == 0) return Read::Closed;
        if (errno == EINTR) continue;
        return errno == EAGAIN || errno == EWOULDBLOCK ? Read::More : Read::Failed;
    }
}

// Drops what was taken once it is most of the buffer, so a long-lived
// connection's buffer does not grow and bytes are moved rarely.
void Inbox::compact() {
    if (start_ == 0 || start_ < buf_.size() / 2) return;
    buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(start_));
    start_ = 0;
}

Inbox::Greeting Inbox::greeting(sp::Protocol peer) {
    if (buf_.size() - start_ < 8) return Greeting::NotYet;
    uint8_t expected[8];
    sp::greeting(peer, expected);
    bool theirs = std::memcmp(buf_.data() + start_, expected, sizeof expected) == 0;
    start_ += 8;
    return theirs ? Greeting::Peer : Greeting::Other;
}

bool Inbox::next(std::vector<uint8_t> &msg) {
    const size_t head = ipc_ ? 9 : 8;
    const size_t have = buf_.size() - start_;
    if (malformed_ || have < head) return false;
    const uint8_t *p = buf_.data() + start_;
    if (ipc_ && p[0] != 1) {
        malformed_ = true;
        return false;
    }
    uint64_t len = 0;
    for (size_t i = head - 8; i < head; ++i) len = len << 8 | p[i];
    if (len > max_) {
        malformed_ = true;
        return false;
    }
    if (have - head < len) return false;
    msg.assign(p + head, p + head + len);
    start_ += head + len;
    return true;
}

}  // namespace th::plain
