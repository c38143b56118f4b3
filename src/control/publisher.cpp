#include "control/publisher.hpp"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/thread_name.hpp"

namespace th {

// One connected subscriber: its greeting arrives first, then nothing (a SUB
// socket sends no messages); events are queued for it until its socket
// takes them.
struct Publisher::Subscriber {
    plain::Fd fd;
    plain::Inbox inbox;
    bool greeted = false;
    std::vector<uint8_t> queue;  // bytes to write; whole frames
    size_t written = 0;          // of queue
    bool watching_out = false;
    Subscriber(plain::Fd f, bool ipc) : fd(std::move(f)), inbox(ipc, 0) {}
};

Publisher::Publisher(const std::string &url) {
    if (!sp::stream_url(url, &ipc_)) fail(TH_ERR_INVALID_ARG, "cannot publish events at '", url, "': only tcp:// and ipc://");
    listener_ = plain::listen(url, &url_);
    epoll_ = plain::Fd(epoll_create1(EPOLL_CLOEXEC));
    if (!epoll_) fail(TH_ERR_INTERNAL, "cannot set up the event stream: ", std::strerror(errno));
    ungreeted_ = std::make_unique<plain::Ungreeted>(epoll_.get());
    for (auto [fd, tag] : {std::pair{stop_.fd(), static_cast<void *>(&stop_)}, {listener_.get(), &listener_}}) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.ptr = tag;
        if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
            fail(TH_ERR_INTERNAL, "cannot set up the event stream: ", std::strerror(errno));
    }
    thread_ = std::thread([this] { run(); });
}

Publisher::~Publisher() {
    stop_.raise();
    thread_.join();
}

uint64_t Publisher::dropped() const {
    std::lock_guard lk(mu_);
    return dropped_;
}

void Publisher::publish(const std::vector<uint8_t> &message) {
    const std::vector<uint8_t> frame = sp::frame(ipc_, {}, message);
    std::lock_guard lk(mu_);
    for (auto &[ptr, s] : subscribers_) {
        if (!s->greeted) continue;
        if (s->queue.size() - s->written + frame.size() > kMaxQueued) {
            ++dropped_;
            continue;
        }
        if (s->written > 0 && s->written == s->queue.size()) {
            s->queue.clear();
            s->written = 0;
        }
        s->queue.insert(s->queue.end(), frame.begin(), frame.end());
        // A subscriber whose socket failed is dropped by the thread, which
        // sees the failure too.
        if (flush(*s)) watch(*s, s->written < s->queue.size());
    }
}

bool Publisher::flush(Subscriber &s) {
    while (s.written < s.queue.size()) {
        ssize_t n = ::send(s.fd.get(), s.queue.data() + s.written, s.queue.size() - s.written, MSG_NOSIGNAL);
        if (n > 0) {
            s.written += static_cast<size_t>(n);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }
    s.queue.clear();
    s.written = 0;
    return true;
}

void Publisher::watch(Subscriber &s, bool out) {
    if (s.watching_out == out) return;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | (out ? static_cast<uint32_t>(EPOLLOUT) : 0u);
    ev.data.ptr = &s;
    if (epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, s.fd.get(), &ev) == 0) s.watching_out = out;
}

void Publisher::run() {
    name_this_thread("th-events");
    epoll_event events[16];
    for (;;) {
        int n = epoll_wait(epoll_.get(), events, 16, -1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            TH_LOG(Error, "the event stream stops: epoll_wait: ", std::strerror(errno));
            return;
        }
        for (int i = 0; i < n; ++i) {
            void *tag = events[i].data.ptr;
            if (tag == &stop_) return;
            if (tag == &listener_) {
                accept_all();
                continue;
            }
            if (tag == ungreeted_.get()) {
                ungreeted_->expire();
                continue;
            }
            auto *s = static_cast<Subscriber *>(tag);
            std::lock_guard lk(mu_);
            if (subscribers_.count(s) == 0) continue;  // dropped earlier in this round
            bool keep = true;
            if (events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLERR | EPOLLHUP)) keep = read_from(*s);
            if (keep && (events[i].events & EPOLLOUT)) {
                keep = flush(*s);
                if (keep) watch(*s, s->written < s->queue.size());
            }
            if (!keep) {
                ungreeted_->forget(s->fd.get());
                epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, s->fd.get(), nullptr);
                subscribers_.erase(s);
            }
        }
    }
}

void Publisher::accept_all() {
    while (plain::Fd fd = plain::accept_greeted(listener_.get(), ipc_, sp::kPub, url_)) {
        auto s = std::make_unique<Subscriber>(std::move(fd), ipc_);
        ungreeted_->add(s->fd.get());
        epoll_event ev{};
        ev.events = EPOLLIN | EPOLLRDHUP;
        ev.data.ptr = s.get();
        std::lock_guard lk(mu_);
        if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, s->fd.get(), &ev) == 0) subscribers_.emplace(s.get(), std::move(s));
        else ungreeted_->forget(s->fd.get());
    }
}

bool Publisher::read_from(Subscriber &s) {
    plain::Inbox::Read read = s.inbox.read_from(s.fd.get());
    if (!s.greeted) {
        auto greeting = s.inbox.greeting(sp::kSub);
        if (greeting == plain::Inbox::Greeting::Other) {
            TH_LOG(Debug, "dropping a connection on ", url_, " that did not greet as a subscriber");
            return false;
        }
        s.greeted = greeting == plain::Inbox::Greeting::Peer;
        if (s.greeted) ungreeted_->forget(s.fd.get());
    }
    // A subscriber sends nothing after its greeting: whatever else comes is
    // dropped unread.
    if (s.greeted) s.inbox = plain::Inbox(ipc_, 0);
    return read == plain::Inbox::Read::More;
}

}  // namespace th
