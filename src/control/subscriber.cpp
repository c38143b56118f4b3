#include "control/subscriber.hpp"

#include <nng/protocol/pubsub0/sub.h>

#include <vector>

#include "common/error.hpp"
#include "control/close.hpp"
#include "control/rpc.hpp"
#include "wire/wire.hpp"

namespace th {

Subscriber::Subscriber(const std::string &url, Handler handler) : url_(url), handler_(std::move(handler)) {
    if (int rv = nng_sub0_open(&sock_); rv != 0) fail(TH_ERR_INTERNAL, "nng_sub0_open: ", nng_error(rv));
    nng_socket_set_size(sock_, NNG_OPT_RECVMAXSZ, 64 << 10);
    nng_socket_set_ms(sock_, NNG_OPT_RECONNMINT, 20);
    nng_socket_set_ms(sock_, NNG_OPT_RECONNMAXT, 500);
    // A SUB socket receives nothing until it subscribes.
    nng_socket_set(sock_, NNG_OPT_SUB_SUBSCRIBE, "", 0);
    if (int rv = nng_dial(sock_, url.c_str(), nullptr, NNG_FLAG_NONBLOCK); rv != 0) {
        nng_close(sock_);
        fail(TH_ERR_INVALID_ARG, "cannot dial event URL '", url, "': ", nng_error(rv));
    }
    if (int rv = nng_aio_alloc(&recv_, nullptr, nullptr); rv != 0) {
        nng_close(sock_);
        fail(TH_ERR_NO_MEMORY, "nng_aio_alloc: ", nng_error(rv));
    }
    thread_ = std::thread([this] {
        for (;;) {
            // No timeout: NNG 1.5's timer thread spins up to a millisecond
            // on every timeout that fires, so a receive that woke every
            // 100 ms cost an idle client ~1% of a core. The destructor
            // stops the aio instead.
            nng_recv_aio(sock_, recv_);
            nng_aio_wait(recv_);
            if (nng_aio_result(recv_) != 0) break;
            nng_msg *msg = nng_aio_get_msg(recv_);
            // Copied: FlatBuffers needs an aligned buffer, an NNG body need not be.
            auto *body = static_cast<const uint8_t *>(nng_msg_body(msg));
            std::vector<uint8_t> event(body, body + nng_msg_len(msg));
            handler_(event.data(), event.size());
            nng_msg_free(msg);
        }
    });
}

Subscriber::~Subscriber() {
    // Stopping the aio cancels the receive in flight and fails every later
    // one, so the loop ends before the socket closes: closing under a
    // blocked receive can hang in NNG 1.5. The socket has no callbacks into
    // this object.
    nng_aio_stop(recv_);
    thread_.join();
    nng_aio_free(recv_);
    close_socket(sock_, "the server's event socket");
}

}  // namespace th
