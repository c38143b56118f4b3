#include "control/requests.hpp"

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "common/error.hpp"
#include "common/log.hpp"
#include "control/close.hpp"
#include "control/plain_socket.hpp"
#include "control/rpc.hpp"
#include "control/sp_stream.hpp"

namespace th {

namespace {

// A REQ message starts with its request id, big-endian, top bit set; a REP
// reply starts with the same four bytes.
constexpr uint32_t kIdBit = 0x80000000u;

// How an exchange ends that interrupt() ended, on either kind of socket.
RequestFailure interrupted() { return {RequestFailure::Closed, "the caller moved on to another server"}; }

// NNG's REQ protocol on a plain socket (control/plain_socket.hpp). One
// thread dials and greets, then only watches the connection for its end; the
// callers write their requests and read the replies themselves. Of the
// callers waiting for a reply one at a time reads the socket (the reader),
// the others wait to be handed theirs, so a lone call's reply wakes its
// caller and no other thread. Callers write one at a time. A request is sent
// on every connection it has not been sent on yet until its reply comes or
// its caller gives up, as NNG's REQ sockets resend on a new connection. A
// write cut short by its caller's deadline leaves half a message on the
// connection, which is then closed (its other requests go out again on the
// next one). Replies to calls that gave up are read, and dropped, by the
// next reader.
class PlainRequests final : public Requests {
  public:
    PlainRequests(const std::string &url, bool ipc);
    ~PlainRequests() override;
    bool connected() const override { return connected_.load(); }
    std::variant<wire::Bytes, RequestFailure> exchange(const wire::Bytes &request, const Deadline &deadline) override;
    void interrupt() override;

  private:
    struct Call {
        std::optional<wire::Bytes> reply;
    };
    // One greeted connection: published, watched until it ends (or wake is
    // readable), retired.
    void serve(int fd, int wake);
    // Writes frame on connection `connection` if that is still the current
    // one; false if it is gone or the write failed.
    bool send(const std::vector<uint8_t> &frame, uint64_t connection, const Deadline &deadline);
    // As the reader (under lk, which it lets go meanwhile): waits until the
    // connection has bytes or deadline, reads them and hands out the replies
    // whole among them.
    void read_replies(std::unique_lock<std::mutex> &lk, const Deadline &deadline);

    std::string url_;
    bool ipc_;

    std::mutex send_mu_;    // one request written at a time; guards what follows
    int sending_fd_ = -1;   // the greeted connection
    uint64_t sending_number_ = 0;  // and its number

    mutable std::mutex mu_;  // guards what follows
    std::condition_variable cv_;  // a reply handed out, the reader's place free, a connection gone or come
    std::unordered_map<uint32_t, std::shared_ptr<Call>> calls_;
    uint32_t next_id_;
    uint64_t connection_ = 0;  // the number of the greeted connection; 0: none
    uint64_t connections_ = 0;
    int fd_ = -1;              // the greeted connection's descriptor
    bool reading_ = false;     // a caller is the reader
    plain::Inbox inbox_;       // what was read of the connection; the reader's alone while it reads
    std::atomic<bool> connected_{false};
    bool interrupted_ = false;  // interrupt(): every exchange ends
    plain::Signal interrupting_;  // raised by interrupt(): wakes the reader
    plain::Dialer dialer_;  // last: its thread starts once the rest is set up, and stops first
};

// A connection ending: how long its reader may take to leave it before the
// connection is shut down under it.
constexpr uint32_t kReaderLeavesMs = 100;

PlainRequests::PlainRequests(const std::string &url, bool ipc)
    : url_(url), ipc_(ipc), next_id_(static_cast<uint32_t>(std::random_device{}())),
      inbox_(ipc, wire::kMaxMessageBytes + 4),
      dialer_(url, "th-requests", sp::kReq, sp::kRep, "request socket",
              [this](int fd, int wake) { serve(fd, wake); }) {}

// No call is in flight (RpcClient's callers hold it while they call).
PlainRequests::~PlainRequests() = default;

void PlainRequests::serve(int fd, int wake) {
    uint64_t number = 0;
    {
        std::lock_guard lk(mu_);
        number = ++connections_;
    }
    {
        std::lock_guard lk(send_mu_);
        sending_fd_ = fd;
        sending_number_ = number;
    }
    {
        std::lock_guard lk(mu_);
        connection_ = number;
        fd_ = fd;
        inbox_ = plain::Inbox(ipc_, wire::kMaxMessageBytes + 4);
        connected_ = true;
    }
    cv_.notify_all();  // callers send (again) on it
    // Its end: the server closed it or reset it, or a caller shut it down
    // (half a request written on it, a reply not framed as one). Data
    // arriving does not wake this thread: the readers take it.
    plain::wait(fd, POLLRDHUP, wake, nullptr);
    std::unique_lock lk(mu_);
    connection_ = 0;
    connected_ = false;
    cv_.notify_all();
    // Its reader reads what is left and the end of the stream; one that
    // does not (a half-open connection) is made to.
    if (!cv_.wait_for(lk, std::chrono::milliseconds(kReaderLeavesMs), [this] { return !reading_; })) {
        ::shutdown(fd, SHUT_RDWR);
        cv_.wait(lk, [this] { return !reading_; });
    }
    fd_ = -1;
    lk.unlock();
    ::shutdown(fd, SHUT_RDWR);     // ends a write in flight on it
    std::lock_guard send_lk(send_mu_);  // which ends before the descriptor closes
    sending_fd_ = -1;
    sending_number_ = 0;
}

bool PlainRequests::send(const std::vector<uint8_t> &frame, uint64_t connection, const Deadline &deadline) {
    std::lock_guard lk(send_mu_);
    if (sending_fd_ < 0 || sending_number_ != connection) return false;
    if (plain::write_all(sending_fd_, frame.data(), frame.size(), &deadline, dialer_.wake())) return true;
    ::shutdown(sending_fd_, SHUT_RDWR);  // half a request on it, or it failed: the connection ends
    return false;
}

void PlainRequests::read_replies(std::unique_lock<std::mutex> &lk, const Deadline &deadline) {
    reading_ = true;
    const int fd = fd_;
    lk.unlock();
    std::vector<std::vector<uint8_t>> replies;
    bool broken = false;
    if (plain::wait(fd, POLLIN, interrupting_.fd(), &deadline) == plain::Ready::Yes) {
        plain::Inbox::Read read = inbox_.read_from(fd);
        std::vector<uint8_t> msg;
        while (inbox_.next(msg)) {
            if (msg.size() < 4 || (msg[0] & 0x80) == 0) {
                TH_LOG(Warn, "dropping the connection to ", url_, ": a message that is not a reply");
                broken = true;
                break;
            }
            replies.push_back(std::move(msg));
        }
        if (inbox_.malformed()) TH_LOG(Warn, "dropping the connection to ", url_, ": a reply longer than any or not framed as one");
        broken = broken || inbox_.malformed() || read != plain::Inbox::Read::More;
    }
    if (broken) ::shutdown(fd, SHUT_RDWR);  // the watching thread retires it
    lk.lock();
    reading_ = false;
    for (const auto &r : replies) {
        uint32_t id = uint32_t(r[0]) << 24 | uint32_t(r[1]) << 16 | uint32_t(r[2]) << 8 | r[3];
        auto it = calls_.find(id);
        if (it == calls_.end() || it->second->reply) continue;  // its caller gave up, or a reply sent twice
        it->second->reply.emplace(r.begin() + 4, r.end());
    }
    cv_.notify_all();  // replies handed out, the reader's place free
}

std::variant<wire::Bytes, RequestFailure> PlainRequests::exchange(const wire::Bytes &request, const Deadline &deadline) {
    auto call = std::make_shared<Call>();
    std::unique_lock lk(mu_);
    uint32_t id = next_id_++ | kIdBit;
    while (calls_.count(id) != 0) id = next_id_++ | kIdBit;
    calls_[id] = call;
    lk.unlock();
    const std::vector<uint8_t> frame = sp::frame(ipc_, {uint8_t(id >> 24), uint8_t(id >> 16), uint8_t(id >> 8), uint8_t(id)}, request);
    lk.lock();
    uint64_t sent_on = 0;
    for (;;) {
        if (call->reply) {
            wire::Bytes reply = std::move(*call->reply);
            calls_.erase(id);
            return reply;
        }
        if (interrupted_) {
            calls_.erase(id);
            return interrupted();
        }
        uint64_t now_on = connection_;
        if (now_on != 0 && now_on != sent_on && !deadline.expired()) {
            lk.unlock();
            bool sent = send(frame, now_on, deadline);
            lk.lock();
            if (sent) sent_on = now_on;
            else if (connection_ == now_on) cv_.wait_until(lk, deadline.at());  // until that connection is retired
            continue;
        }
        if (deadline.expired()) {
            calls_.erase(id);
            // Never sent, or its connection is gone: whether a server listens is for the caller to find out.
            if (sent_on == 0 || connection_ == 0) return RequestFailure{RequestFailure::Unreachable, ""};
            return RequestFailure{RequestFailure::NoAnswer, ""};
        }
        if (now_on != 0 && now_on == sent_on && !reading_) {
            read_replies(lk, deadline);
            continue;
        }
        cv_.wait_until(lk, deadline.at());
    }
}

void PlainRequests::interrupt() {
    {
        std::lock_guard lk(mu_);
        interrupted_ = true;
    }
    interrupting_.raise();  // stays raised: a later reader returns at once too
    cv_.notify_all();
}

// NNG's REQ socket, for the schemes not dialled on plain sockets here.
class NngRequests final : public Requests {
  public:
    explicit NngRequests(const std::string &url);
    // The close is bounded (control/close.hpp); its pipe callbacks count
    // into pipes_, which the closing thread keeps.
    ~NngRequests() override { close_socket(sock_, "the connection to the server", pipes_); }
    bool connected() const override { return pipes_->load() > 0; }
    std::variant<wire::Bytes, RequestFailure> exchange(const wire::Bytes &request, const Deadline &deadline) override;
    void interrupt() override;

  private:
    static void on_pipe(nng_pipe, nng_pipe_ev ev, void *pipes);
    nng_socket sock_ = NNG_SOCKET_INITIALIZER;
    std::mutex mu_;  // guards what follows
    bool interrupted_ = false;
    std::unordered_set<nng_aio *> in_flight_;  // the exchanges' aios, for interrupt() to cancel
    // Connected pipes, counted by NNG's callbacks; its own allocation, which
    // a close that outlives this object keeps alive.
    std::shared_ptr<std::atomic<int>> pipes_ = std::make_shared<std::atomic<int>>(0);
};

NngRequests::NngRequests(const std::string &url) {
    if (int rv = nng_req0_open(&sock_); rv != 0) fail(TH_ERR_INTERNAL, "nng_req0_open: ", nng_error(rv));
    nng_socket_set_size(sock_, NNG_OPT_RECVMAXSZ, wire::kMaxMessageBytes);
    nng_socket_set_ms(sock_, NNG_OPT_RECONNMINT, static_cast<nng_duration>(sp::kFirstRetry.count()));
    nng_socket_set_ms(sock_, NNG_OPT_RECONNMAXT, static_cast<nng_duration>(sp::kLastRetry.count()));
    // A request is re-sent when its connection is re-established; a timer-based
    // resend would duplicate slow requests, so it is left long.
    nng_socket_set_ms(sock_, NNG_OPT_REQ_RESENDTIME, 60000);
    nng_pipe_notify(sock_, NNG_PIPE_EV_ADD_POST, &NngRequests::on_pipe, pipes_.get());
    nng_pipe_notify(sock_, NNG_PIPE_EV_REM_POST, &NngRequests::on_pipe, pipes_.get());
    if (int rv = nng_dial(sock_, url.c_str(), nullptr, NNG_FLAG_NONBLOCK); rv != 0) {
        nng_close(sock_);
        fail(TH_ERR_INVALID_ARG, "cannot dial server URL '", url, "': ", nng_error(rv), sp::url_form_hint(url));
    }
}

void NngRequests::on_pipe(nng_pipe, nng_pipe_ev ev, void *pipes) {
    auto *n = static_cast<std::atomic<int> *>(pipes);
    if (ev == NNG_PIPE_EV_ADD_POST) ++*n;
    else if (ev == NNG_PIPE_EV_REM_POST) --*n;
}

std::variant<wire::Bytes, RequestFailure> NngRequests::exchange(const wire::Bytes &request, const Deadline &deadline) {
    nng_ctx ctx = NNG_CTX_INITIALIZER;
    if (int rv = nng_ctx_open(&ctx, sock_); rv != 0) return RequestFailure{RequestFailure::Closed, nng_error(rv)};
    nng_aio *aio = nullptr;
    if (int rv = nng_aio_alloc(&aio, nullptr, nullptr); rv != 0) {
        nng_ctx_close(ctx);
        return RequestFailure{RequestFailure::Broken, str("nng_aio_alloc: ", nng_error(rv))};
    }
    // Runs an operation on aio to its end, unless interrupt() came first:
    // NNG_ECANCELED then, as when interrupt() cancels it (both under mu_, so
    // that no operation starts unseen between them).
    auto run = [&](auto operation) -> int {
        {
            std::lock_guard lk(mu_);
            if (interrupted_) return NNG_ECANCELED;
            in_flight_.insert(aio);
            operation();
        }
        nng_aio_wait(aio);
        return nng_aio_result(aio);
    };
    auto failure = [&](int rv, const char *doing) {
        if (rv == NNG_ECANCELED) return interrupted();
        RequestFailure::Kind kind = rv == NNG_ECLOSED ? RequestFailure::Closed : RequestFailure::Broken;
        if (rv == NNG_ETIMEDOUT) kind = connected() ? RequestFailure::NoAnswer : RequestFailure::Unreachable;
        return RequestFailure{kind, str(doing, ": ", nng_error(rv))};
    };
    std::variant<wire::Bytes, RequestFailure> out;
    nng_msg *msg = nullptr;
    if (int rv = nng_msg_alloc(&msg, 0); rv != 0) {
        out = RequestFailure{RequestFailure::Broken, str("nng_msg_alloc: ", nng_error(rv))};
    } else {
        nng_msg_append(msg, request.data(), request.size());
        nng_aio_set_msg(aio, msg);
        nng_aio_set_timeout(aio, deadline.remaining_ms());
        if (int rv = run([&] { nng_ctx_send(ctx, aio); }); rv != 0) {
            nng_msg_free(nng_aio_get_msg(aio));  // on a failed send we still own it
            // A request is sent once a server is connected.
            out = rv == NNG_ETIMEDOUT ? RequestFailure{RequestFailure::Unreachable, ""} : failure(rv, "sending");
        } else {
            nng_aio_set_timeout(aio, deadline.remaining_ms());
            if (int rv = run([&] { nng_ctx_recv(ctx, aio); }); rv != 0) {
                out = failure(rv, "receiving");
            } else {
                nng_msg *reply = nng_aio_get_msg(aio);
                auto *body = static_cast<const uint8_t *>(nng_msg_body(reply));
                out = wire::Bytes(body, body + nng_msg_len(reply));
                nng_msg_free(reply);
            }
        }
    }
    {
        std::lock_guard lk(mu_);
        in_flight_.erase(aio);
    }
    nng_aio_free(aio);
    nng_ctx_close(ctx);
    return out;
}

void NngRequests::interrupt() {
    std::lock_guard lk(mu_);
    interrupted_ = true;
    for (nng_aio *aio : in_flight_) nng_aio_cancel(aio);
}

}  // namespace

std::unique_ptr<Requests> dial_requests(const std::string &url) {
    bool ipc = false;
    if (sp::stream_url(url, &ipc)) return std::make_unique<PlainRequests>(url, ipc);
    return std::make_unique<NngRequests>(url);
}

}  // namespace th
