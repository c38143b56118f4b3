#include "control/rpc.hpp"

#include <nng/protocol/reqrep0/rep.h>

#include <cstring>

#include "common/error.hpp"
#include "common/log.hpp"
#include "control/close.hpp"
#include "control/requests.hpp"
#include "wire/auth.hpp"

namespace th {

std::string nng_error(int rv) { return nng_strerror(rv); }

namespace {

// Host part of a tcp URL ("tcp://1.2.3.4:0" -> "tcp://1.2.3.4").
std::string without_port(const std::string &url) {
    size_t colon = url.rfind(':');
    size_t scheme = url.find("://");
    if (colon == std::string::npos || scheme == std::string::npos || colon < scheme + 3) return url;
    return url.substr(0, colon);
}

}  // namespace

void check_dial(const std::string &url, uint32_t timeout_ms) {
    nng_stream_dialer *dialer = nullptr;
    if (nng_stream_dialer_alloc(&dialer, url.c_str()) != 0) return;
    nng_aio *aio = nullptr;
    if (nng_aio_alloc(&aio, nullptr, nullptr) != 0) {
        nng_stream_dialer_free(dialer);
        return;
    }
    nng_aio_set_timeout(aio, static_cast<nng_duration>(timeout_ms));
    nng_stream_dialer_dial(dialer, aio);
    nng_aio_wait(aio);
    int rv = nng_aio_result(aio);
    if (rv == 0) nng_stream_free(static_cast<nng_stream *>(nng_aio_get_output(aio, 0)));
    nng_aio_free(aio);
    nng_stream_dialer_free(dialer);
    if (rv == NNG_ETIMEDOUT) fail(TH_ERR_UNAVAILABLE, "cannot reach the tensorhub server at ", url, " (no connection in time)");
    if (rv != 0) fail(TH_ERR_UNAVAILABLE, "cannot reach the tensorhub server at ", url, ": ", nng_error(rv));
}

RpcClient::RpcClient(const std::string &url, std::string token)
    : url_(url), token_(std::move(token)), requests_(dial_requests(url)) {}

// Callers hold the client through a shared_ptr while they call: no call is in
// flight here.
RpcClient::~RpcClient() = default;

bool RpcClient::connected() const { return requests_->connected(); }

// Called once the deadline passed with no server connected: the connection
// is dialled again and again silently, so one more dial says why (a refused
// connection: nothing listens at that address). Briefly: a refusal comes
// back at once, and a failover waits for this.
void RpcClient::fail_unreachable() const {
    constexpr uint32_t kProbeMs = 50;
    check_dial(url_, kProbeMs);
    fail(TH_ERR_UNAVAILABLE, "cannot reach the tensorhub server at ", url_, " (no connection in time)");
}

wire::Bytes RpcClient::call(const wire::Bytes &request, const Deadline &deadline) {
    if (abandoned_) fail(TH_ERR_CLOSED, "the connection to ", url_, " was given up");
    auto out = requests_->exchange(wire::seal(request, token_), deadline);
    if (const auto *f = std::get_if<RequestFailure>(&out)) {
        switch (f->kind) {
        case RequestFailure::Unreachable:
            fail_unreachable();
        case RequestFailure::NoAnswer:
            fail(TH_ERR_TIMEOUT, "the tensorhub server at ", url_, " did not answer in time");
        case RequestFailure::Closed:
            fail(TH_ERR_CLOSED, "the connection to server ", url_, " was closed: ", f->text);
        case RequestFailure::Broken:
            break;
        }
        fail(TH_ERR_UNAVAILABLE, "talking to server ", url_, ": ", f->text);
    }
    wire::Bytes &reply = std::get<wire::Bytes>(out);
    try {
        reply.resize(wire::open(reply.data(), reply.size(), token_));
    } catch (const Error &e) {
        fail(TH_ERR_AUTH, "the reply of ", url_, " ", e.what());
    }
    return std::move(reply);
}

// One request in flight on the server: a context and its aio, alternating
// between receiving a request and sending the reply.
struct RpcServer::Slot {
    RpcServer *server = nullptr;
    nng_ctx ctx = NNG_CTX_INITIALIZER;
    nng_aio *aio = nullptr;
    bool sending = false;
};

RpcServer::RpcServer(const std::string &url, Handler handler, int parallel) : handler_(std::move(handler)) {
    if (int rv = nng_rep0_open(&sock_); rv != 0) fail(TH_ERR_INTERNAL, "nng_rep0_open: ", nng_error(rv));
    nng_socket_set_size(sock_, NNG_OPT_RECVMAXSZ, wire::kMaxMessageBytes);
    nng_listener listener;
    if (int rv = nng_listen(sock_, url.c_str(), &listener, 0); rv != 0) {
        nng_close(sock_);
        fail(rv == NNG_EADDRINUSE ? TH_ERR_UNAVAILABLE : TH_ERR_INVALID_ARG, "cannot listen on '", url, "': ",
             nng_error(rv));
    }
    url_ = url;
    int port = 0;
    if (url.rfind("tcp", 0) == 0 && nng_listener_get_int(listener, NNG_OPT_TCP_BOUND_PORT, &port) == 0)
        url_ = without_port(url) + ":" + std::to_string(port);
    for (int i = 0; i < parallel; ++i) {
        auto slot = std::make_unique<Slot>();
        slot->server = this;
        if (nng_aio_alloc(&slot->aio, &RpcServer::on_io, slot.get()) != 0 || nng_ctx_open(&slot->ctx, sock_) != 0) {
            nng_close(sock_);
            for (auto &s : slots_) nng_aio_free(s->aio);
            if (slot->aio) nng_aio_free(slot->aio);
            fail(TH_ERR_NO_MEMORY, "cannot allocate server contexts");
        }
        slots_.push_back(std::move(slot));
    }
    for (auto &s : slots_) nng_ctx_recv(s->ctx, s->aio);
}

RpcServer::~RpcServer() {
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

void RpcServer::on_io(void *slot) {
    auto *s = static_cast<Slot *>(slot);
    s->server->step(*s);
}

void RpcServer::step(Slot &s) {
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

}  // namespace th
