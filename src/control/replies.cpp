#include "control/replies.hpp"

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/thread_name.hpp"
#include "control/close.hpp"
#include "control/plain_socket.hpp"
#include "control/rpc.hpp"
#include "control/sp_stream.hpp"

namespace th {

namespace {

// A REQ message starts with its backtrace: 32-bit big-endian words, the last
// (the request id) with its top bit set; a reply repeats it. A client
// connected directly sends one word; a device in between adds its own.
constexpr size_t kMaxBacktraceWords = 8;

// The length of msg's backtrace, 0 if it has none (not a request).
size_t backtrace_size(const std::vector<uint8_t> &msg) {
    for (size_t at = 0; at + 4 <= msg.size() && at < 4 * kMaxBacktraceWords; at += 4)
        if (msg[at] & 0x80) return at + 4;
    return 0;
}

// A reply stuck this long on a client that does not read (stopped, or its
// socket full) gives its connection up.
constexpr uint32_t kReplyTimeoutMs = 5000;

// Plain sockets: `parallel` threads wait in one epoll, each connection armed
// once (EPOLLONESHOT). The thread woken for a connection reads what arrived,
// takes the whole messages, arms the connection again (so that its next
// request is handled meanwhile by another thread) and answers them itself.
class PlainReplies final : public Replies {
  public:
    PlainReplies(const std::string &url, bool ipc, ReplyHandler handler, int parallel);
    ~PlainReplies() override;
    const std::string &url() const override { return url_; }

  private:
    struct Conn {
        plain::Fd fd;
        std::mutex read_mu;  // guards inbox and greeted: one thread reads at a time
        plain::Inbox inbox;
        bool greeted = false;
        std::mutex write_mu;  // one reply written at a time
        bool broken = false;  // under write_mu: a reply was cut short
        Conn(plain::Fd f, bool ipc) : fd(std::move(f)), inbox(ipc, wire::kMaxMessageBytes + 4 * kMaxBacktraceWords) {}
    };
    void run();
    void accept_all();
    // Reads from c and answers what arrived whole.
    void serve(const std::shared_ptr<Conn> &c);
    void answer(Conn &c, const std::vector<uint8_t> &msg);
    // Arms c's descriptor for its next event (add: the first time).
    bool arm(int fd, void *tag, bool add);
    void drop(Conn *c);

    std::string url_;
    bool ipc_;
    ReplyHandler handler_;
    plain::Listener listener_;
    plain::Fd epoll_;
    plain::Signal stop_;  // raised once stopping: wakes every thread and ends writes
    std::unique_ptr<plain::Ungreeted> ungreeted_;  // in epoll_
    std::atomic<bool> stopping_{false};
    std::mutex mu_;   // guards conns_
    std::unordered_map<Conn *, std::shared_ptr<Conn>> conns_;
    std::vector<std::thread> threads_;
};

PlainReplies::PlainReplies(const std::string &url, bool ipc, ReplyHandler handler, int parallel)
    : ipc_(ipc), handler_(std::move(handler)) {
    listener_ = plain::listen(url, &url_);
    epoll_ = plain::Fd(epoll_create1(EPOLL_CLOEXEC));
    if (!epoll_) fail(TH_ERR_INTERNAL, "cannot set up the server's sockets: ", std::strerror(errno));
    ungreeted_ = std::make_unique<plain::Ungreeted>(epoll_.get());
    epoll_event ev{};
    ev.events = EPOLLIN;  // level-triggered: wakes every thread once stopping
    ev.data.ptr = &stop_;
    if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, stop_.fd(), &ev) != 0 || !arm(listener_.get(), &listener_, true))
        fail(TH_ERR_INTERNAL, "cannot set up the server's sockets: ", std::strerror(errno));
    for (int i = 0; i < std::max(parallel, 1); ++i) threads_.emplace_back([this] { run(); });
}

PlainReplies::~PlainReplies() {
    stopping_ = true;
    stop_.raise();
    for (auto &t : threads_) t.join();
    std::lock_guard lk(mu_);
    conns_.clear();
}

bool PlainReplies::arm(int fd, void *tag, bool add) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
    ev.data.ptr = tag;
    return epoll_ctl(epoll_.get(), add ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &ev) == 0;
}

void PlainReplies::run() {
    name_this_thread("th-replies");
    for (;;) {
        epoll_event ev{};
        int n = epoll_wait(epoll_.get(), &ev, 1, -1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            TH_LOG(Error, "the server stops answering requests: epoll_wait: ", std::strerror(errno));
            return;
        }
        if (n == 0) continue;
        if (ev.data.ptr == &stop_) return;
        if (ev.data.ptr == &listener_) {
            accept_all();
            continue;
        }
        if (ev.data.ptr == ungreeted_.get()) {
            ungreeted_->expire();
            continue;
        }
        std::shared_ptr<Conn> c;
        {
            std::lock_guard lk(mu_);
            auto it = conns_.find(static_cast<Conn *>(ev.data.ptr));
            if (it == conns_.end()) continue;
            c = it->second;
        }
        serve(c);
    }
}

void PlainReplies::accept_all() {
    while (plain::Fd fd = plain::accept_greeted(listener_.get(), ipc_, sp::kRep, url_)) {
        auto c = std::make_shared<Conn>(std::move(fd), ipc_);
        ungreeted_->add(c->fd.get());
        std::lock_guard lk(mu_);
        if (arm(c->fd.get(), c.get(), true)) conns_.emplace(c.get(), c);
        else ungreeted_->forget(c->fd.get());
    }
    if (!arm(listener_.get(), &listener_, false))
        TH_LOG(Error, "the server stops accepting connections on ", url_, ": ", std::strerror(errno));
}

void PlainReplies::serve(const std::shared_ptr<Conn> &c) {
    std::vector<std::vector<uint8_t>> requests;
    bool keep = true;
    {
        std::lock_guard lk(c->read_mu);
        plain::Inbox::Read read = c->inbox.read_from(c->fd.get());
        if (!c->greeted) {
            auto greeting = c->inbox.greeting(sp::kReq);
            if (greeting != plain::Inbox::Greeting::NotYet) ungreeted_->forget(c->fd.get());
            c->greeted = greeting == plain::Inbox::Greeting::Peer;
            if (greeting == plain::Inbox::Greeting::Other) {
                TH_LOG(Debug, "dropping a connection on ", url_, " that did not greet as a request socket");
                keep = false;
            }
        }
        std::vector<uint8_t> msg;
        while (keep && c->greeted && c->inbox.next(msg)) requests.push_back(std::move(msg));
        if (c->inbox.malformed()) {
            TH_LOG(Debug, "dropping a connection on ", url_, ": a request longer than any or not framed as one");
            keep = false;
        }
        if (read != plain::Inbox::Read::More) keep = false;
    }
    if (!keep || !arm(c->fd.get(), c.get(), false)) {
        drop(c.get());
        return;
    }
    for (const auto &msg : requests) answer(*c, msg);
}

void PlainReplies::answer(Conn &c, const std::vector<uint8_t> &msg) {
    size_t head = backtrace_size(msg);
    if (head == 0) return;  // not a request: dropped, as NNG's REP does
    // FlatBuffers reads 8-byte fields in place: the request is copied to an
    // aligned address.
    wire::Bytes request(msg.begin() + static_cast<std::ptrdiff_t>(head), msg.end());
    wire::Bytes reply = handler_(request.data(), request.size());
    std::vector<uint8_t> frame = sp::frame(ipc_, std::vector<uint8_t>(msg.begin(), msg.begin() + static_cast<std::ptrdiff_t>(head)), reply);
    std::lock_guard lk(c.write_mu);
    if (c.broken || stopping_) return;  // a server stopping answers no more
    Deadline deadline(kReplyTimeoutMs);
    if (!plain::write_all(c.fd.get(), frame.data(), frame.size(), &deadline, stop_.fd())) {
        // Half a reply on it: of no use. Its next event drops it.
        c.broken = true;
        ::shutdown(c.fd.get(), SHUT_RDWR);
    }
}

void PlainReplies::drop(Conn *c) {
    ungreeted_->forget(c->fd.get());
    epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c->fd.get(), nullptr);
    std::lock_guard lk(mu_);
    conns_.erase(c);  // closed once no reply is being written on it
}

// NNG's REP socket: `parallel` contexts, each with its aio alternating
// between receiving a request and sending the reply.
class NngReplies final : public Replies {
  public:
    NngReplies(const std::string &url, ReplyHandler handler, int parallel);
    ~NngReplies() override;
    const std::string &url() const override { return url_; }

  private:
    struct Slot {
        NngReplies *server = nullptr;
        nng_ctx ctx = NNG_CTX_INITIALIZER;
        nng_aio *aio = nullptr;
        bool sending = false;
    };
    static void on_io(void *slot);
    void step(Slot &slot);

    std::string url_;
    ReplyHandler handler_;
    nng_socket sock_ = NNG_SOCKET_INITIALIZER;
    std::vector<std::unique_ptr<Slot>> slots_;
    std::atomic<bool> stopping_{false};
};

NngReplies::NngReplies(const std::string &url, ReplyHandler handler, int parallel) : url_(url), handler_(std::move(handler)) {
    if (int rv = nng_rep0_open(&sock_); rv != 0) fail(TH_ERR_INTERNAL, "nng_rep0_open: ", nng_error(rv));
    nng_socket_set_size(sock_, NNG_OPT_RECVMAXSZ, wire::kMaxMessageBytes);
    nng_listener listener;
    if (int rv = nng_listen(sock_, url.c_str(), &listener, 0); rv != 0) {
        nng_close(sock_);
        fail(rv == NNG_EADDRINUSE ? TH_ERR_UNAVAILABLE : TH_ERR_INVALID_ARG, "cannot listen on '", url, "': ",
             nng_error(rv), sp::url_form_hint(url));
    }
    // "ws://host:0/path": the port picked goes in its place.
    if (int port = 0; nng_listener_get_int(listener, NNG_OPT_TCP_BOUND_PORT, &port) == 0) url_ = sp::with_port(url, port);
    for (int i = 0; i < parallel; ++i) {
        auto slot = std::make_unique<Slot>();
        slot->server = this;
        if (nng_aio_alloc(&slot->aio, &NngReplies::on_io, slot.get()) != 0 || nng_ctx_open(&slot->ctx, sock_) != 0) {
            nng_close(sock_);
            for (auto &s : slots_) nng_aio_free(s->aio);
            if (slot->aio) nng_aio_free(slot->aio);
            fail(TH_ERR_NO_MEMORY, "cannot allocate server contexts");
        }
        slots_.push_back(std::move(slot));
    }
    for (auto &s : slots_) nng_ctx_recv(s->ctx, s->aio);
}

NngReplies::~NngReplies() {
    stopping_ = true;
    for (auto &s : slots_) nng_aio_stop(s->aio);
    // Bounded like the clients' sockets (close.hpp): a server that did not
    // exit on SIGTERM was found waiting in this close. The stopped contexts'
    // aios are freed once the close has ended.
    struct Aios {
        std::vector<std::unique_ptr<Slot>> slots;
        ~Aios() {
            for (auto &s : slots) nng_aio_free(s->aio);
        }
    };
    auto aios = std::make_shared<Aios>();
    aios->slots = std::move(slots_);
    close_socket(sock_, "the server's request socket", aios);
}

void NngReplies::on_io(void *slot) {
    auto *s = static_cast<Slot *>(slot);
    s->server->step(*s);
}

void NngReplies::step(Slot &s) {
    int rv = nng_aio_result(s.aio);
    if (s.sending) {
        s.sending = false;
        if (rv != 0) nng_msg_free(nng_aio_get_msg(s.aio));
    } else if (rv == 0) {
        nng_msg *msg = nng_aio_get_msg(s.aio);
        // FlatBuffers reads 8-byte fields in place, so the request must sit at
        // an aligned address; an NNG message body need not.
        auto *body = static_cast<const uint8_t *>(nng_msg_body(msg));
        wire::Bytes request(body, body + nng_msg_len(msg));
        wire::Bytes reply = handler_(request.data(), request.size());
        nng_msg_clear(msg);
        nng_msg_append(msg, reply.data(), reply.size());
        nng_aio_set_msg(s.aio, msg);
        s.sending = true;
        if (stopping_) {
            nng_msg_free(msg);
            return;
        }
        nng_ctx_send(s.ctx, s.aio);
        return;
    } else if (rv == NNG_ECLOSED || rv == NNG_ECANCELED || stopping_) {
        return;
    } else {
        TH_LOG(Warn, "server receive failed: ", nng_error(rv));
    }
    if (!stopping_) nng_ctx_recv(s.ctx, s.aio);
}

}  // namespace

std::unique_ptr<Replies> serve_replies(const std::string &url, ReplyHandler handler, int parallel) {
    bool ipc = false;
    if (sp::stream_url(url, &ipc)) return std::make_unique<PlainReplies>(url, ipc, std::move(handler), parallel);
    return std::make_unique<NngReplies>(url, std::move(handler), parallel);
}

}  // namespace th
