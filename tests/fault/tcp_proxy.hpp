// A TCP proxy on 127.0.0.1 between tensorhub clients and the server, with
// fault windows: this kernel has no netem, so control-plane faults are made
// here. One thread forwards bytes both ways; during a window it
//   Delay: holds every piece of data for a fixed time (order is kept),
//   Reset: resets every connection, and every new one, with RST,
//   Drop:  swallows every byte in both directions, then resets the
//          connections when the window ends (what TCP does once it gives up
//          on a lossy path; NNG then reconnects and re-sends its requests).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <list>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace th_fault {

class TcpProxy {
  public:
    enum class Mode { Pass, Delay, Reset, Drop };
    using Clock = std::chrono::steady_clock;
    using Ms = std::chrono::milliseconds;

    explicit TcpProxy(uint16_t target_port) : target_port_(target_port) {
        // CLOEXEC everywhere: a child process holding a copy of a proxied
        // socket would keep it open after we "reset" it.
        listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        sockaddr_in a = loopback(0);
        if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0 ||
            listen(listen_fd_, 64) != 0)
            throw std::runtime_error("proxy: cannot listen on 127.0.0.1");
        socklen_t len = sizeof a;
        getsockname(listen_fd_, reinterpret_cast<sockaddr *>(&a), &len);
        port_ = ntohs(a.sin_port);
        thread_ = std::thread([this] { loop(); });
    }
    ~TcpProxy() {
        stop_ = true;
        thread_.join();
        for (Conn &c : conns_) close_conn(c, false);
        close(listen_fd_);
    }
    TcpProxy(const TcpProxy &) = delete;
    TcpProxy &operator=(const TcpProxy &) = delete;

    std::string url() const { return "tcp://127.0.0.1:" + std::to_string(port_); }

    // Starts a fault window now. `delay` is used by Mode::Delay only.
    void fault(Mode mode, Ms window, Ms delay) {
        std::lock_guard lk(mu_);
        mode_ = mode;
        delay_ = delay;
        window_end_ = Clock::now() + window;
    }
    // Pieces delayed or swallowed plus connections reset, over all windows:
    // evidence that a window really hit control traffic.
    uint64_t touched() const { return touched_.load(); }

  private:
    struct Piece {
        Clock::time_point due;
        std::string bytes;
    };
    struct Conn {
        int fd[2] = {-1, -1};     // [0] the client side, [1] the server side
        std::deque<Piece> out[2];  // bytes waiting to be written to fd[i]
        bool dead = false;
    };

    static sockaddr_in loopback(uint16_t port) {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(port);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        return a;
    }

    // Closes with RST rather than FIN: the peer sees "connection reset".
    static void reset(int fd) {
        linger l{1, 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
        close(fd);
    }
    void close_conn(Conn &c, bool with_reset) {
        for (int &fd : c.fd) {
            if (fd < 0) continue;
            with_reset ? reset(fd) : (void)close(fd);
            fd = -1;
        }
        c.dead = true;
    }
    void reset_all() {
        for (Conn &c : conns_)
            if (!c.dead) {
                close_conn(c, true);
                touched_++;
            }
    }

    Mode current_mode(Clock::time_point now, Ms *delay) {
        std::lock_guard lk(mu_);
        *delay = delay_;
        return now < window_end_ ? mode_ : Mode::Pass;
    }

    void accept_new(Mode mode) {
        for (;;) {
            int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (fd < 0) return;
            if (mode == Mode::Reset) {
                reset(fd);
                touched_++;
                continue;
            }
            // A blocking connect to the loopback is immediate; then non-blocking.
            int up = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            sockaddr_in a = loopback(target_port_);
            if (up < 0 || connect(up, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0) {
                if (up >= 0) close(up);
                reset(fd);
                continue;
            }
            fcntl(up, F_SETFL, fcntl(up, F_GETFL) | O_NONBLOCK);
            Conn c;
            c.fd[0] = fd;
            c.fd[1] = up;
            conns_.push_back(std::move(c));
        }
    }

    // Reads what fd[side] has and queues it for the other side.
    void read_side(Conn &c, int side, Mode mode, Ms delay, Clock::time_point now) {
        char buf[65536];
        for (;;) {
            ssize_t n = recv(c.fd[side], buf, sizeof buf, 0);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                c.dead = true;
                return;
            }
            if (n < 0) return;
            if (mode == Mode::Drop) {
                touched_++;
                continue;
            }
            std::deque<Piece> &q = c.out[1 - side];
            auto due = now + (mode == Mode::Delay ? delay : Ms(0));
            if (!q.empty()) due = std::max(due, q.back().due);  // never reorder bytes
            if (mode == Mode::Delay) touched_++;
            q.push_back({due, std::string(buf, static_cast<size_t>(n))});
        }
    }

    void write_side(Conn &c, int side, Clock::time_point now) {
        std::deque<Piece> &q = c.out[side];
        while (!q.empty() && q.front().due <= now) {
            std::string &b = q.front().bytes;
            ssize_t n = send(c.fd[side], b.data(), b.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n < 0) {
                if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) c.dead = true;
                return;
            }
            b.erase(0, static_cast<size_t>(n));
            if (!b.empty()) return;
            q.pop_front();
        }
    }

    void loop() {
        Mode before = Mode::Pass;
        while (!stop_) {
            auto now = Clock::now();
            Ms delay{0};
            Mode mode = current_mode(now, &delay);
            // Entering a reset window, or leaving a drop window, cuts every
            // connection: the requests swallowed are then re-sent by NNG.
            if ((mode == Mode::Reset && before != Mode::Reset) || (before == Mode::Drop && mode != Mode::Drop))
                reset_all();
            before = mode;

            std::vector<pollfd> fds = {{listen_fd_, POLLIN, 0}};
            auto wake = now + Ms(5);
            for (Conn &c : conns_)
                for (int side = 0; side < 2 && !c.dead; ++side) {
                    short ev = POLLIN;
                    if (!c.out[side].empty()) {
                        if (c.out[side].front().due <= now) ev |= POLLOUT;
                        else wake = std::min(wake, c.out[side].front().due);
                    }
                    fds.push_back({c.fd[side], ev, 0});
                }
            int wait_ms = static_cast<int>(std::chrono::duration_cast<Ms>(wake - now).count());
            poll(fds.data(), fds.size(), std::max(wait_ms, 1));

            now = Clock::now();
            if (fds[0].revents & POLLIN) accept_new(mode);
            for (Conn &c : conns_)
                for (int side = 0; side < 2 && !c.dead; ++side) {
                    read_side(c, side, mode, delay, now);
                    if (!c.dead) write_side(c, side, now);
                }
            for (Conn &c : conns_)
                if (c.dead) close_conn(c, false);
            conns_.remove_if([](const Conn &c) { return c.dead; });
        }
    }

    uint16_t target_port_ = 0, port_ = 0;
    int listen_fd_ = -1;
    std::list<Conn> conns_;  // only the proxy thread touches them
    std::mutex mu_;
    Mode mode_ = Mode::Pass;
    Ms delay_{0};
    Clock::time_point window_end_{};
    std::atomic<uint64_t> touched_{0};
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

}  // namespace th_fault
