#include "control/requests.hpp"

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <unordered_map>

#include "common/error.hpp"
#include "common/log.hpp"
#include "control/close.hpp"
#include "control/rpc.hpp"
#include "control/sp_stream.hpp"

namespace th {

namespace {

// A REQ message starts with its request id, big-endian, top bit set; a REP
// reply starts with the same four bytes.
constexpr uint32_t kIdBit = 0x80000000u;

// NNG's REQ protocol over a byte stream (control/sp_stream.hpp). The
// dialer's thread greets and reads replies; callers queue their requests and
// wait for their replies. A request is sent on every connection it has not
// been sent on yet until its reply comes or its caller gives up, as NNG's REQ
// sockets resend on a new connection. Requests go out one at a time and
// whole, whatever their callers' deadlines: a message cut short would leave
// the server's NNG receiving one as the connection closes, the very bug this
// class keeps away from the client.
class StreamRequests final : public Requests {
  public:
    StreamRequests(const std::string &url, bool ipc);
    ~StreamRequests() override;
    bool connected() const override { return connected_.load(); }
    std::variant<wire::Bytes, RequestFailure> exchange(const wire::Bytes &request, const Deadline &deadline) override;

  private:
    struct Call {
        std::optional<wire::Bytes> reply;
    };
    // One connection: greets, then reads replies until it fails.
    bool serve(nng_stream *stream, nng_aio *aio);
    // Queues call id's frame on connection `connection` if that is still
    // the current one.
    bool queue(uint32_t id, const std::vector<uint8_t> &frame, uint64_t connection);
    // Takes call id's frame out of the queue if it is not being sent yet.
    void unqueue(uint32_t id);
    // Under send_mu_: sends the next frame queued, or the rest of the one in
    // flight (more), unless one is being sent.
    void send_next(bool more = false);
    static void on_sent(void *self);

    std::string url_;
    bool ipc_;

    std::mutex send_mu_;  // guards what follows
    nng_aio *send_aio_ = nullptr;
    nng_stream *sending_on_ = nullptr;  // the greeted connection
    uint64_t sending_number_ = 0;       // and its number
    std::deque<std::pair<uint32_t, std::vector<uint8_t>>> outbox_;  // by call id
    std::vector<uint8_t> in_flight_;  // the frame being sent: kept until its send ended
    size_t in_flight_sent_ = 0;
    bool sending_ = false;

    mutable std::mutex mu_;  // guards what follows
    std::condition_variable cv_;
    std::unordered_map<uint32_t, std::shared_ptr<Call>> calls_;
    uint32_t next_id_;
    uint64_t connection_ = 0;  // the number of the greeted connection; 0: none
    uint64_t connections_ = 0;
    bool warned_ = false;  // about a peer that is not a REP socket (once)
    std::atomic<bool> connected_{false};
    std::unique_ptr<sp::Dialer> dialer_;  // last: stopped before the rest goes
};

StreamRequests::StreamRequests(const std::string &url, bool ipc)
    : url_(url), ipc_(ipc), next_id_(static_cast<uint32_t>(std::random_device{}())) {
    if (int rv = nng_aio_alloc(&send_aio_, &StreamRequests::on_sent, this); rv != 0)
        fail(TH_ERR_NO_MEMORY, "nng_aio_alloc: ", nng_error(rv));
    nng_aio_set_timeout(send_aio_, NNG_DURATION_INFINITE);
    try {
        dialer_ = std::make_unique<sp::Dialer>(url, "the server",
                                               [this](nng_stream *stream, nng_aio *aio) { return serve(stream, aio); });
    } catch (...) {
        nng_aio_free(send_aio_);
        throw;
    }
}

// No call is in flight (RpcClient's callers hold it while they call).
StreamRequests::~StreamRequests() {
    dialer_.reset();
    nng_aio_free(send_aio_);
}

bool StreamRequests::serve(nng_stream *stream, nng_aio *aio) {
    if (!sp::greet(stream, aio, sp::kReq, sp::kRep, url_, "request socket", &warned_)) return false;
    uint64_t number = 0;
    {
        std::lock_guard lk(mu_);
        number = ++connections_;
    }
    {
        std::lock_guard lk(send_mu_);
        sending_on_ = stream;
        sending_number_ = number;
    }
    {
        std::lock_guard lk(mu_);
        connection_ = number;
        connected_ = true;
    }
    cv_.notify_all();  // callers send (again) on it
    // Between replies the receive waits without a timeout: NNG 1.5's timer
    // thread spins up to a millisecond on every timeout that fires.
    nng_aio_set_timeout(aio, NNG_DURATION_INFINITE);
    std::vector<uint8_t> msg;
    for (bool malformed = false;;) {
        if (!sp::receive(stream, aio, ipc_, wire::kMaxMessageBytes + 4, msg, &malformed)) {
            if (malformed) TH_LOG(Warn, "dropping the connection to ", url_, ": a reply longer than any or not framed as one");
            break;
        }
        if (msg.size() < 4 || (msg[0] & 0x80) == 0) {
            TH_LOG(Warn, "dropping the connection to ", url_, ": a message that is not a reply");
            break;
        }
        uint32_t id = uint32_t(msg[0]) << 24 | uint32_t(msg[1]) << 16 | uint32_t(msg[2]) << 8 | msg[3];
        std::lock_guard lk(mu_);
        auto it = calls_.find(id);
        if (it == calls_.end() || it->second->reply) continue;  // its caller gave up, or a reply sent twice
        it->second->reply.emplace(msg.begin() + 4, msg.end());
        cv_.notify_all();
    }
    {
        std::lock_guard lk(mu_);
        connection_ = 0;
        connected_ = false;
    }
    cv_.notify_all();
    {
        std::lock_guard lk(send_mu_);
        sending_on_ = nullptr;
        sending_number_ = 0;
        outbox_.clear();
    }
    nng_stream_close(stream);  // ends a send in flight on it
    nng_aio_wait(send_aio_);   // and its callback, before the stream is freed
    return true;
}

bool StreamRequests::queue(uint32_t id, const std::vector<uint8_t> &frame, uint64_t connection) {
    std::lock_guard lk(send_mu_);
    if (sending_on_ == nullptr || sending_number_ != connection) return false;
    outbox_.emplace_back(id, frame);
    send_next();
    return true;
}

void StreamRequests::unqueue(uint32_t id) {
    std::lock_guard lk(send_mu_);
    std::erase_if(outbox_, [id](const auto &f) { return f.first == id; });
}

void StreamRequests::send_next(bool more) {
    if (sending_on_ == nullptr) return;
    if (!more) {
        if (sending_ || outbox_.empty()) return;
        in_flight_ = std::move(outbox_.front().second);
        outbox_.pop_front();
        in_flight_sent_ = 0;
    }
    sending_ = true;
    nng_iov iov{in_flight_.data() + in_flight_sent_, in_flight_.size() - in_flight_sent_};
    nng_aio_set_iov(send_aio_, 1, &iov);
    nng_stream_send(sending_on_, send_aio_);
}

void StreamRequests::on_sent(void *arg) {
    auto *self = static_cast<StreamRequests *>(arg);
    std::lock_guard lk(self->send_mu_);
    self->sending_ = false;
    if (nng_aio_result(self->send_aio_) != 0) {
        // The connection is of no use: its receive is made to end too, and
        // the requests waiting go out on the next one.
        if (self->sending_on_ != nullptr) nng_stream_close(self->sending_on_);
        return;
    }
    self->in_flight_sent_ += nng_aio_count(self->send_aio_);
    self->send_next(/*more=*/self->in_flight_sent_ < self->in_flight_.size());
}

std::variant<wire::Bytes, RequestFailure> StreamRequests::exchange(const wire::Bytes &request, const Deadline &deadline) {
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
        uint64_t now_on = connection_;
        if (now_on != 0 && now_on != sent_on && !deadline.expired()) {
            lk.unlock();
            bool queued = queue(id, frame, now_on);
            lk.lock();
            if (queued) sent_on = now_on;
            continue;  // else that connection is gone already: the next one
        }
        if (deadline.expired()) {
            calls_.erase(id);
            lk.unlock();
            unqueue(id);  // a request nobody waits for is not sent
            lk.lock();
            // Never sent, or its connection is gone: whether a server listens is for the caller to find out.
            if (sent_on == 0 || connection_ == 0) return RequestFailure{RequestFailure::Unreachable, ""};
            return RequestFailure{RequestFailure::NoAnswer, ""};
        }
        cv_.wait_until(lk, deadline.at());
    }
}

// NNG's REQ socket, for the schemes a stream is not dialled for here.
class SocketRequests final : public Requests {
  public:
    explicit SocketRequests(const std::string &url);
    // The close is bounded (control/close.hpp); its pipe callbacks count
    // into pipes_, which the closing thread keeps.
    ~SocketRequests() override { close_socket(sock_, "the connection to the server", pipes_); }
    bool connected() const override { return pipes_->load() > 0; }
    std::variant<wire::Bytes, RequestFailure> exchange(const wire::Bytes &request, const Deadline &deadline) override;

  private:
    static void on_pipe(nng_pipe, nng_pipe_ev ev, void *pipes);
    nng_socket sock_ = NNG_SOCKET_INITIALIZER;
    // Connected pipes, counted by NNG's callbacks; its own allocation, which
    // a close that outlives this object keeps alive.
    std::shared_ptr<std::atomic<int>> pipes_ = std::make_shared<std::atomic<int>>(0);
};

SocketRequests::SocketRequests(const std::string &url) {
    if (int rv = nng_req0_open(&sock_); rv != 0) fail(TH_ERR_INTERNAL, "nng_req0_open: ", nng_error(rv));
    nng_socket_set_size(sock_, NNG_OPT_RECVMAXSZ, wire::kMaxMessageBytes);
    nng_socket_set_ms(sock_, NNG_OPT_RECONNMINT, static_cast<nng_duration>(sp::kFirstRetry.count()));
    nng_socket_set_ms(sock_, NNG_OPT_RECONNMAXT, static_cast<nng_duration>(sp::kLastRetry.count()));
    // A request is re-sent when its connection is re-established; a timer-based
    // resend would duplicate slow requests, so it is left long.
    nng_socket_set_ms(sock_, NNG_OPT_REQ_RESENDTIME, 60000);
    nng_pipe_notify(sock_, NNG_PIPE_EV_ADD_POST, &SocketRequests::on_pipe, pipes_.get());
    nng_pipe_notify(sock_, NNG_PIPE_EV_REM_POST, &SocketRequests::on_pipe, pipes_.get());
    if (int rv = nng_dial(sock_, url.c_str(), nullptr, NNG_FLAG_NONBLOCK); rv != 0) {
        nng_close(sock_);
        fail(TH_ERR_INVALID_ARG, "cannot dial server URL '", url, "': ", nng_error(rv));
    }
}

void SocketRequests::on_pipe(nng_pipe, nng_pipe_ev ev, void *pipes) {
    auto *n = static_cast<std::atomic<int> *>(pipes);
    if (ev == NNG_PIPE_EV_ADD_POST) ++*n;
    else if (ev == NNG_PIPE_EV_REM_POST) --*n;
}

std::variant<wire::Bytes, RequestFailure> SocketRequests::exchange(const wire::Bytes &request, const Deadline &deadline) {
    nng_ctx ctx = NNG_CTX_INITIALIZER;
    if (int rv = nng_ctx_open(&ctx, sock_); rv != 0) return RequestFailure{RequestFailure::Closed, nng_error(rv)};
    nng_aio *aio = nullptr;
    if (int rv = nng_aio_alloc(&aio, nullptr, nullptr); rv != 0) {
        nng_ctx_close(ctx);
        return RequestFailure{RequestFailure::Broken, str("nng_aio_alloc: ", nng_error(rv))};
    }
    auto failure = [&](int rv, const char *doing) {
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
        nng_ctx_send(ctx, aio);
        nng_aio_wait(aio);
        if (int rv = nng_aio_result(aio); rv != 0) {
            nng_msg_free(nng_aio_get_msg(aio));  // on a failed send we still own it
            // A request is sent once a server is connected.
            out = rv == NNG_ETIMEDOUT ? RequestFailure{RequestFailure::Unreachable, ""} : failure(rv, "sending");
        } else {
            nng_aio_set_timeout(aio, deadline.remaining_ms());
            nng_ctx_recv(ctx, aio);
            nng_aio_wait(aio);
            if (int rv = nng_aio_result(aio); rv != 0) {
                out = failure(rv, "receiving");
            } else {
                nng_msg *reply = nng_aio_get_msg(aio);
                auto *body = static_cast<const uint8_t *>(nng_msg_body(reply));
                out = wire::Bytes(body, body + nng_msg_len(reply));
                nng_msg_free(reply);
            }
        }
    }
    nng_aio_free(aio);
    nng_ctx_close(ctx);
    return out;
}

}  // namespace

std::unique_ptr<Requests> dial_requests(const std::string &url) {
    bool ipc = false;
    if (sp::stream_url(url, &ipc)) return std::make_unique<StreamRequests>(url, ipc);
    return std::make_unique<SocketRequests>(url);
}

}  // namespace th
