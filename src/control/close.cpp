#include "control/close.hpp"

#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <thread>

#include "common/log.hpp"
#include "common/thread_name.hpp"

namespace th {

bool close_within(std::function<void()> close, std::chrono::milliseconds limit, const char *what) {
    struct State {
        std::mutex mu;
        std::condition_variable cv;
        bool done = false;
    };
    auto state = std::make_shared<State>();
    std::thread([state, close = std::move(close)] {
        name_this_thread("th-close");
        close();
        std::lock_guard lk(state->mu);
        state->done = true;
        state->cv.notify_all();
    }).detach();
    std::unique_lock lk(state->mu);
    if (state->cv.wait_for(lk, limit, [&] { return state->done; })) return true;
    TH_LOG(Warn, "closing ", what, " did not end within ", limit.count(), " ms; going on without it");
    return false;
}

bool nng_loses_its_reaper(const char *version) {
    int major = 0, minor = 0;
    if (version == nullptr || std::sscanf(version, "%d.%d", &major, &minor) != 2) return false;
    return major < 1 || (major == 1 && minor < 6);
}

bool close_socket(nng_socket s, const char *what, std::shared_ptr<const void> keep_alive) {
    if (close_within([s, keep_alive = std::move(keep_alive)] { nng_close(s); }, kCloseLimit, what)) return true;
    static std::once_flag once;
    if (nng_loses_its_reaper(nng_version()))
        std::call_once(once, [] {
            TH_LOG(Error, "NNG ", nng_version(), " most likely lost its reaper thread: before 1.6.0 it does when a "
                   "connection closes while a message is arriving on it. From now on closing NNG sockets in this "
                   "process waits out its bound, and a connection to the server that is lost is not dialled "
                   "again: restart this process if it must outlive a server failover. Building tensorhub against "
                   "NNG 1.6.0 or later avoids it (README, \"Building by hand\").");
        });
    return false;
}

}  // namespace th
