#include "control/subscriber.hpp"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "common/error.hpp"
#include "common/log.hpp"

namespace th {

namespace {

// Events are a few hundred bytes; a longer message is not one.
constexpr uint64_t kMaxEvent = 64 << 10;

}  // namespace

Subscriber::Subscriber(const std::string &url, Handler handler) : url_(url), handler_(std::move(handler)) {
    if (!sp::stream_url(url, &ipc_framing_))
        fail(TH_ERR_INVALID_ARG, "cannot subscribe to events at '", url, "': only tcp:// and ipc:// are supported");
    dialer_ = std::make_unique<plain::Dialer>(url, "th-subscriber", sp::kSub, sp::kPub, "event stream",
                                              [this](int fd, int wake) { serve(fd, wake); });
}

Subscriber::~Subscriber() = default;

void Subscriber::serve(int fd, int wake) {
    plain::Inbox inbox(ipc_framing_, kMaxEvent);
    std::vector<uint8_t> event;
    // Between events it waits in poll without a timeout: an idle client
    // does not wake.
    while (plain::wait(fd, POLLIN, wake, nullptr) == plain::Ready::Yes) {
        plain::Inbox::Read read = inbox.read_from(fd);
        while (inbox.next(event)) handler_(event.data(), event.size());
        if (inbox.malformed()) {
            TH_LOG(Warn, "dropping the event stream from ", url_, ": a message longer than ", kMaxEvent,
                   " bytes or not framed as one is not an event; connecting again");
            break;
        }
        if (read != plain::Inbox::Read::More) break;
    }
}

}  // namespace th
