#include "control/sp_stream.hpp"

#include <algorithm>
#include <chrono>
#include <utility>

#include "common/error.hpp"
#include "common/log.hpp"

namespace th::sp {

namespace {

constexpr nng_duration kGreetingTimeoutMs = 5000;

bool has_scheme(const std::string &url, const char *scheme) { return url.rfind(scheme, 0) == 0; }

// Sends or receives (op) all of data on stream with aio (whose timeout
// applies to each step); false when the stream failed or the aio was stopped.
bool whole(nng_stream *stream, nng_aio *aio, void (*op)(nng_stream *, nng_aio *), void *data, size_t size) {
    auto *p = static_cast<uint8_t *>(data);
    while (size > 0) {
        nng_iov iov{p, size};
        nng_aio_set_iov(aio, 1, &iov);
        op(stream, aio);
        nng_aio_wait(aio);
        size_t n = nng_aio_count(aio);
        if (nng_aio_result(aio) != 0 || n == 0) return false;
        p += n;
        size -= n;
    }
    return true;
}

}  // namespace

bool stream_url(const std::string &url, bool *ipc) {
    *ipc = has_scheme(url, "ipc://") || has_scheme(url, "unix://") || has_scheme(url, "abstract://");
    return *ipc || has_scheme(url, "tcp://") || has_scheme(url, "tcp4://") || has_scheme(url, "tcp6://");
}

void greeting(Protocol p, uint8_t out[8]) {
    const uint8_t g[8] = {0x00, 'S', 'P', 0x00, static_cast<uint8_t>(p >> 8), static_cast<uint8_t>(p & 0xff), 0x00, 0x00};
    std::copy(g, g + 8, out);
}

bool greeted_by(const uint8_t theirs[8], Protocol peer, const std::string &url, const char *what, bool *warned) {
    uint8_t expected[8];
    greeting(peer, expected);
    if (std::equal(theirs, theirs + 8, expected)) return true;
    if (!*warned)
        TH_LOG(Warn, "what listens at ", url, " is not a tensorhub server's ", what, " (it did not greet as NNG ",
               peer == kPub ? "PUB" : peer == kRep ? "REP" : "SP", ")");
    *warned = true;
    return false;
}

bool greet(nng_stream *stream, nng_aio *aio, Protocol self, Protocol peer, const std::string &url, const char *what,
           bool *warned) {
    uint8_t mine[8], theirs[8];
    greeting(self, mine);
    if (!whole(stream, aio, nng_stream_send, mine, sizeof mine) || !whole(stream, aio, nng_stream_recv, theirs, sizeof theirs))
        return false;
    return greeted_by(theirs, peer, url, what, warned);
}

bool receive(nng_stream *stream, nng_aio *aio, bool ipc, uint64_t max, std::vector<uint8_t> &msg, bool *malformed) {
    *malformed = false;
    uint8_t head[9];
    const size_t head_size = ipc ? 9 : 8;
    if (!whole(stream, aio, nng_stream_recv, head, head_size)) return false;
    const uint8_t *len_bytes = ipc ? head + 1 : head;
    uint64_t len = 0;
    for (int i = 0; i < 8; ++i) len = len << 8 | len_bytes[i];
    if ((ipc && head[0] != 1) || len > max) {
        *malformed = true;
        return false;
    }
    msg.resize(len);
    return whole(stream, aio, nng_stream_recv, msg.data(), msg.size());
}

std::vector<uint8_t> frame(bool ipc, const std::vector<uint8_t> &head, const std::vector<uint8_t> &body) {
    std::vector<uint8_t> frame;
    frame.reserve(9 + head.size() + body.size());
    if (ipc) frame.push_back(1);
    uint64_t len = head.size() + body.size();
    for (int i = 7; i >= 0; --i) frame.push_back(static_cast<uint8_t>(len >> (8 * i)));
    frame.insert(frame.end(), head.begin(), head.end());
    frame.insert(frame.end(), body.begin(), body.end());
    return frame;
}

Dialer::Dialer(const std::string &url, const char *what, Serve serve) : serve_(std::move(serve)) {
    if (int rv = nng_stream_dialer_alloc(&dialer_, url.c_str()); rv != 0)
        fail(TH_ERR_INVALID_ARG, "cannot dial ", what, " at '", url, "': ", nng_strerror(rv));
    if (int rv = nng_aio_alloc(&aio_, nullptr, nullptr); rv != 0) {
        nng_stream_dialer_free(dialer_);
        fail(TH_ERR_NO_MEMORY, "nng_aio_alloc: ", nng_strerror(rv));
    }
    thread_ = std::thread([this] { run(); });
}

Dialer::~Dialer() {
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

void Dialer::run() {
    auto retry = kFirstRetry;
    for (;;) {
        nng_aio_set_timeout(aio_, kGreetingTimeoutMs);
        nng_stream_dialer_dial(dialer_, aio_);
        nng_aio_wait(aio_);
        if (nng_aio_result(aio_) == 0) {
            auto *stream = static_cast<nng_stream *>(nng_aio_get_output(aio_, 0));
            {
                std::lock_guard lk(mu_);
                stream_ = stream;
            }
            nng_aio_set_timeout(aio_, kGreetingTimeoutMs);
            if (serve_(stream, aio_)) retry = kFirstRetry;
            std::unique_lock lk(mu_);
            if (stop_) return;  // the destructor frees stream_
            stream_ = nullptr;
            lk.unlock();
            nng_stream_close(stream);
            nng_stream_free(stream);
        }
        // Lost or not reached: try again, backing off like NNG's dialers.
        std::unique_lock lk(mu_);
        if (cv_.wait_for(lk, retry, [this] { return stop_; })) return;
        retry = std::min(retry * 2, kLastRetry);
    }
}

}  // namespace th::sp
