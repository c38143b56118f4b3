#include "common/fork_guard.hpp"

#include <unistd.h>

#include <atomic>

#include "common/error.hpp"

namespace th {

namespace {
std::atomic<pid_t> g_owner{0};  // the process that started the threads
}  // namespace

void note_threads_started() {
    pid_t none = 0;
    g_owner.compare_exchange_strong(none, getpid());
}

bool in_forked_child() {
    pid_t owner = g_owner.load(std::memory_order_relaxed);
    return owner != 0 && owner != getpid();
}

void check_not_forked() {
    if (in_forked_child())
        fail(TH_ERR_UNSUPPORTED, "this process was forked from process ", g_owner.load(),
             ", which had started tensorhub: its threads and connections do not survive fork(), so tensorhub "
             "cannot be used here. Start worker processes with spawn or forkserver (Python: "
             "multiprocessing.get_context('spawn')), or fork before the first client or server is created");
}

}  // namespace th
