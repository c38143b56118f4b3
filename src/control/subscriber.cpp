#include "control/subscriber.hpp"

#include <utility>
#include <vector>

#include "common/error.hpp"
#include "common/log.hpp"
#include "control/sp_stream.hpp"

namespace th {

namespace {

// Events are a few hundred bytes; a longer message is not one.
constexpr uint64_t kMaxEvent = 64 << 10;

}  // namespace

Subscriber::Subscriber(const std::string &url, Handler handler) : url_(url), handler_(std::move(handler)) {
    if (!sp::stream_url(url, &ipc_framing_))
        fail(TH_ERR_INVALID_ARG, "cannot subscribe to events at '", url, "': only tcp:// and ipc:// are supported");
    dialer_ = std::make_unique<sp::Dialer>(url, "the event stream",
                                           [this](nng_stream *stream, nng_aio *aio) { return serve(stream, aio); });
}

Subscriber::~Subscriber() { dialer_.reset(); }  // before what serve() uses

bool Subscriber::serve(nng_stream *stream, nng_aio *aio) {
    if (!sp::greet(stream, aio, sp::kSub, sp::kPub, url_, "event stream", &warned_)) return false;
    // Between events the receive waits without a timeout: NNG 1.5's timer
    // thread spins up to a millisecond on every timeout that fires.
    nng_aio_set_timeout(aio, NNG_DURATION_INFINITE);
    std::vector<uint8_t> event;
    for (bool malformed = false;;) {
        if (!sp::receive(stream, aio, ipc_framing_, kMaxEvent, event, &malformed)) {
            if (malformed)
                TH_LOG(Warn, "dropping the event stream from ", url_, ": a message longer than ", kMaxEvent,
                       " bytes or not framed as one is not an event; connecting again");
            return true;
        }
        handler_(event.data(), event.size());
    }
}

}  // namespace th
