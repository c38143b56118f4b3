#include "control/close.hpp"

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "common/log.hpp"

namespace th {

bool close_within(std::function<void()> close, std::chrono::milliseconds limit, const char *what) {
    struct State {
        std::mutex mu;
        std::condition_variable cv;
        bool done = false;
    };
    auto state = std::make_shared<State>();
    std::thread([state, close = std::move(close)] {
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

bool close_socket(nng_socket s, const char *what, std::shared_ptr<const void> keep_alive) {
    return close_within([s, keep_alive = std::move(keep_alive)] { nng_close(s); }, kCloseLimit, what);
}

}  // namespace th
