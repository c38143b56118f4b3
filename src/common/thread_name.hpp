// Names for the library's threads, so that top -H, perf and gdb say what
// each one does: "th-" and its job, 15 characters at most (Linux's limit).
#pragma once

#include <pthread.h>

namespace th {

inline void name_this_thread(const char *name) { pthread_setname_np(pthread_self(), name); }

}  // namespace th
