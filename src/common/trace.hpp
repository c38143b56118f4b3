// An event trace for profiling the data path across processes. With
// TENSORHUB_TRACE_DIR set, each process appends one line per event to
// <dir>/trace-<pid>.tsv: CLOCK_MONOTONIC in nanoseconds (one clock for every
// process of a host, network namespaces included), the event's name and up
// to four numbers, tab-separated. perf/cluster/hop_profile.py reads them.
// Unset (the default), an event costs one predictable branch.
#pragma once

#include <cstdint>

namespace th::trace {

bool on();
void event(const char *what, uint64_t a = 0, uint64_t b = 0, uint64_t c = 0, uint64_t d = 0);
// Writes out what is buffered (a process killed later keeps its lines).
void flush();

}  // namespace th::trace
