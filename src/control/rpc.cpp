#include "control/rpc.hpp"

#include "common/error.hpp"
#include "common/log.hpp"
#include "control/plain_socket.hpp"
#include "control/replies.hpp"
#include "control/requests.hpp"
#include "wire/auth.hpp"

namespace th {

std::string nng_error(int rv) { return nng_strerror(rv); }

void check_dial(const std::string &url, uint32_t timeout_ms) {
    bool ipc = false;
    if (!sp::stream_url(url, &ipc)) return;
    std::string why;
    if (plain::dial(url, Deadline(timeout_ms), -1, &why)) return;
    if (why == plain::kNoConnectionInTime) fail(TH_ERR_UNAVAILABLE, "cannot reach the tensorhub server at ", url, " (no connection in time)");
    fail(TH_ERR_UNAVAILABLE, "cannot reach the tensorhub server at ", url, ": ", why);
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

void RpcClient::abandon() {
    abandoned_ = true;
    requests_->interrupt();
}

RpcServer::RpcServer(const std::string &url, Handler handler, int parallel)
    : replies_(serve_replies(url, std::move(handler), parallel)) {}

RpcServer::~RpcServer() = default;

const std::string &RpcServer::url() const { return replies_->url(); }

}  // namespace th
