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
    nng_socket_set_ms(sock_, NNG_OPT_RECVTIMEO, 100);  // bounds how long stopping takes
    nng_socket_set_ms(sock_, NNG_OPT_RECONNMINT, 20);
    nng_socket_set_ms(sock_, NNG_OPT_RECONNMAXT, 500);
    // A SUB socket receives nothing until it subscribes.
    nng_socket_set(sock_, NNG_OPT_SUB_SUBSCRIBE, "", 0);
    if (int rv = nng_dial(sock_, url.c_str(), nullptr, NNG_FLAG_NONBLOCK); rv != 0) {
        nng_close(sock_);
        fail(TH_ERR_INVALID_ARG, "cannot dial event URL '", url, "': ", nng_error(rv));
    }
    thread_ = std::thread([this] {
        while (!stop_.load()) {
            nng_msg *msg = nullptr;
            int rv = nng_recvmsg(sock_, &msg, 0);
            if (rv == NNG_ETIMEDOUT) continue;
            if (rv != 0) break;
            // Copied: FlatBuffers needs an aligned buffer, an NNG body need not be.
            auto *body = static_cast<const uint8_t *>(nng_msg_body(msg));
            std::vector<uint8_t> event(body, body + nng_msg_len(msg));
            handler_(event.data(), event.size());
            nng_msg_free(msg);
        }
    });
}

Subscriber::~Subscriber() {
    // Let the receive loop end on its own (it wakes every 100 ms) before the
    // socket closes: closing under a blocked receive can hang in NNG 1.5. The
    // socket has no callbacks into this object.
    stop_ = true;
    thread_.join();
    close_socket(sock_, "the server's event socket");
}

}  // namespace th
