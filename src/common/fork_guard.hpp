// Fork safety. tensorhub's threads (NNG's, UCX's progress thread, the
// heartbeat) do not survive fork(): in a child, handles inherited from the
// parent have no threads behind them, and NNG's library state, initialized by
// the parent, panics or hangs when used again. So once a process started
// them, every call from a process forked from it fails with
// TH_ERR_UNSUPPORTED and a message that says what to do, and destroying an
// inherited handle there leaks it instead of waiting for threads that do not
// exist.
#pragma once

namespace th {

// Records that this process started tensorhub's threads (first client or
// server). Idempotent.
void note_threads_started();
// True in a process forked from one that started them.
bool in_forked_child();
// Throws Error(TH_ERR_UNSUPPORTED) in a forked child.
void check_not_forked();

}  // namespace th
