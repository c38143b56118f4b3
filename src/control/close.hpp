// Closing NNG sockets without hanging. NNG 1.5.2's nng_close can wait
// forever on its reaper thread: when a message is arriving on a pipe as it
// closes, its TCP transport resubmits a read that is dropped, and the reaper
// waits for it (fixed in NNG 1.6.0). Over tcp and ipc the control plane
// uses no NNG socket for that reason (control/sp_stream.hpp); what still
// closes NNG sockets (requests over other schemes) does it with a bound:
// past it, the close is left to finish (or not) on a thread of its own and the
// caller goes on, with a warning.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include <nng/nng.h>

namespace th {

constexpr std::chrono::milliseconds kCloseLimit{2000};

// Runs close on a thread of its own and waits for it at most `limit`.
// Returns false, after a warning naming `what`, when it did not end in time;
// whatever close needs must then stay valid until it ends (capture it).
bool close_within(std::function<void()> close, std::chrono::milliseconds limit, const char *what);

// Whether an NNG of this version (nng_version()'s form, "1.5.2") loses its
// reaper thread for good when a pipe closes while a message is arriving on
// it: before 1.6.0. A close past its bound there most likely means that, and
// close_socket then says what it costs, once per process.
bool nng_loses_its_reaper(const char *version);

// nng_close(s), bounded by kCloseLimit. The socket's callbacks may touch
// only what keep_alive holds (kept until the close ends), or nothing of its
// owner.
bool close_socket(nng_socket s, const char *what, std::shared_ptr<const void> keep_alive = nullptr);

}  // namespace th
