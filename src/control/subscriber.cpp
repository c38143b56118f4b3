#include "control/subscriber.hpp"

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include "common/error.hpp"
#include "common/log.hpp"
#include "control/rpc.hpp"

namespace th {

namespace {

// The SP wire mapping (the same for TCP and IPC): each end sends
// 0x00 'S' 'P' 0x00, its protocol number (16 bits, big-endian) and two zero
// bytes. PUB is protocol 32, SUB 33.
constexpr uint8_t kGreeting[8] = {0x00, 'S', 'P', 0x00, 0x00, 33, 0x00, 0x00};
constexpr uint8_t kPubGreeting[8] = {0x00, 'S', 'P', 0x00, 0x00, 32, 0x00, 0x00};
// Events are a few hundred bytes; a longer message is not one.
constexpr uint64_t kMaxEvent = 64 << 10;
constexpr nng_duration kGreetingTimeoutMs = 5000;
constexpr auto kFirstRetry = std::chrono::milliseconds(20);
constexpr auto kLastRetry = std::chrono::milliseconds(500);

bool has_scheme(const std::string &url, const char *scheme) { return url.rfind(scheme, 0) == 0; }

}  // namespace

Subscriber::Subscriber(const std::string &url, Handler handler) : url_(url), handler_(std::move(handler)) {
    if (has_scheme(url, "ipc://") || has_scheme(url, "unix://") || has_scheme(url, "abstract://"))
        ipc_framing_ = true;
    else if (!has_scheme(url, "tcp://") && !has_scheme(url, "tcp4://") && !has_scheme(url, "tcp6://"))
        fail(TH_ERR_INVALID_ARG, "cannot subscribe to events at '", url, "': only tcp:// and ipc:// are supported");
    if (int rv = nng_stream_dialer_alloc(&dialer_, url.c_str()); rv != 0)
        fail(TH_ERR_INVALID_ARG, "cannot dial event URL '", url, "': ", nng_error(rv));
    if (int rv = nng_aio_alloc(&aio_, nullptr, nullptr); rv != 0) {
        nng_stream_dialer_free(dialer_);
        fail(TH_ERR_NO_MEMORY, "nng_aio_alloc: ", nng_error(rv));
    }
    thread_ = std::thread([this] { run(); });
}

Subscriber::~Subscriber() {
    {
        std::lock_guard lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    // Cancels the dial, send or receive in flight and fails every later one,
    // so the thread ends without another wait. NNG calls the cancellation on
    // the stream or dialer after letting go of its own lock, so neither may
    // be freed meanwhile: once stop_ is set the thread frees no stream, and
    // the one it holds is freed here.
    nng_aio_stop(aio_);
    thread_.join();
    if (stream_ != nullptr) {
        nng_stream_close(stream_);
        nng_stream_free(stream_);
    }
    nng_stream_dialer_free(dialer_);
    nng_aio_free(aio_);
}

void Subscriber::run() {
    auto retry = kFirstRetry;
    for (;;) {
        nng_aio_set_timeout(aio_, kGreetingTimeoutMs);
        nng_stream_dialer_dial(dialer_, aio_);
        nng_aio_wait(aio_);
        if (nng_aio_result(aio_) == 0) {
            {
                std::lock_guard lk(mu_);
                stream_ = static_cast<nng_stream *>(nng_aio_get_output(aio_, 0));
            }
            if (serve(stream_)) retry = kFirstRetry;
            std::unique_lock lk(mu_);
            if (stop_) return;  // the destructor frees stream_
            nng_stream *lost = std::exchange(stream_, nullptr);
            lk.unlock();
            nng_stream_close(lost);
            nng_stream_free(lost);
        }
        // Lost or not reached: try again, backing off like NNG's dialers.
        std::unique_lock lk(mu_);
        if (cv_.wait_for(lk, retry, [this] { return stop_; })) return;
        retry = std::min(retry * 2, kLastRetry);
    }
}

bool Subscriber::serve(nng_stream *stream) {
    uint8_t peer[8];
    nng_aio_set_timeout(aio_, kGreetingTimeoutMs);
    uint8_t greeting[sizeof kGreeting];
    std::copy(kGreeting, kGreeting + sizeof kGreeting, greeting);
    if (!whole(stream, nng_stream_send, greeting, sizeof greeting) || !whole(stream, nng_stream_recv, peer, sizeof peer))
        return false;
    if (!std::equal(peer, peer + sizeof peer, kPubGreeting)) {
        if (!warned_) TH_LOG(Warn, "the event stream at ", url_, " is not a tensorhub server's (it did not greet as NNG PUB)");
        warned_ = true;
        return false;
    }
    // Between events the receive waits without a timeout: NNG 1.5's timer
    // thread spins up to a millisecond on every timeout that fires.
    nng_aio_set_timeout(aio_, NNG_DURATION_INFINITE);
    std::vector<uint8_t> event;
    for (;;) {
        uint8_t head[9];
        const size_t head_size = ipc_framing_ ? 9 : 8;
        if (!whole(stream, nng_stream_recv, head, head_size)) return true;
        const uint8_t *len_bytes = ipc_framing_ ? head + 1 : head;
        uint64_t len = 0;
        for (int i = 0; i < 8; ++i) len = len << 8 | len_bytes[i];
        if ((ipc_framing_ && head[0] != 1) || len > kMaxEvent) {
            TH_LOG(Warn, "dropping the event stream from ", url_, ": a message of ", len,
                   " bytes is not an event; connecting again");
            return true;
        }
        // A vector's storage is aligned enough for FlatBuffers.
        event.resize(len);
        if (!whole(stream, nng_stream_recv, event.data(), event.size())) return true;
        handler_(event.data(), event.size());
    }
}

bool Subscriber::whole(nng_stream *stream, void (*op)(nng_stream *, nng_aio *), void *data, size_t size) {
    auto *p = static_cast<uint8_t *>(data);
    while (size > 0) {
        nng_iov iov{p, size};
        nng_aio_set_iov(aio_, 1, &iov);
        op(stream, aio_);
        nng_aio_wait(aio_);
        size_t n = nng_aio_count(aio_);
        if (nng_aio_result(aio_) != 0 || n == 0) return false;
        p += n;
        size -= n;
    }
    return true;
}

}  // namespace th
