// What every program of the cluster benchmark shares with its orchestrator
// (perf/cluster/cluster.py): wall-clock timestamps (CLOCK_REALTIME, the one
// clock every network namespace of a machine shares), one JSON object per line
// on stdout, and a line protocol on stdin:
//
//   program prints {"event":"armed"}  once set up (buffers filled, connected)
//   orchestrator:  start T0           T0 in seconds since the epoch
//   program sleeps until T0 + its ready offset, acts, prints its figures
//   orchestrator:  verify             program checks the bytes it holds
//   orchestrator:  quit (or EOF)      program releases everything and exits
#pragma once

#include <time.h>

#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>

#include "args.hpp"
#include "pattern.hpp"

namespace th_cluster {

inline double wall_now() {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

inline void sleep_until(double t) {
    timespec ts{};
    ts.tv_sec = static_cast<time_t>(t);
    ts.tv_nsec = static_cast<long>((t - double(ts.tv_sec)) * 1e9);
    while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, nullptr) != 0) {
    }
}

// One JSON line, flushed at once: the orchestrator reads lines as they come.
inline void emit(const std::string &json) {
    std::fputs((json + "\n").c_str(), stdout);
    std::fflush(stdout);
}

inline std::string fixed(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6f", v);
    return buf;
}

// The next command from the orchestrator; "quit" at end of input, so a
// vanished orchestrator never leaves a program behind.
inline std::string next_command() {
    std::string line;
    if (!std::getline(std::cin, line)) return "quit";
    return line;
}

// Waits for "start T0" and returns T0.
inline double wait_for_start() {
    emit("{\"event\":\"armed\"}");
    for (;;) {
        std::string cmd = next_command();
        if (cmd.rfind("start ", 0) == 0) return std::stod(cmd.substr(6));
        if (cmd == "quit") throw std::runtime_error("told to quit before the start");
    }
}

// Answers "verify" with {"verified":...} from check() until "quit".
template <typename Check>
void serve_until_quit(Check check) {
    for (;;) {
        std::string cmd = next_command();
        if (cmd == "quit") return;
        if (cmd == "verify") emit(std::string("{\"verified\":") + (check() ? "true" : "false") + "}");
    }
}

// The bytes every system moves: S bytes of th_support's pattern for (version
// kVersion, shard 0, tensor i), split into `tensors` equal pieces (the tensorhub shard's
// tensors; the other systems move the pieces back to back).
// Runs with several versions (the prefetch scenario) hold the pattern of
// each version in turn.
struct Payload {
    // The tensorhub trainer publishes two earlier versions before T0, as a
    // training loop would have: the timed one is the third.
    static constexpr uint64_t kVersion = 3;
    uint64_t bytes;
    unsigned tensors;
    uint64_t piece() const { return bytes / tensors; }
    void fill(uint8_t *p, uint64_t version = kVersion) const {
        for (unsigned t = 0; t < tensors; ++t)
            th_support::fill_pattern(p + t * piece(), piece(), th_support::pattern_seed(version, 0, t));
    }
    bool check(const uint8_t *p, uint64_t version = kVersion) const {
        for (unsigned t = 0; t < tensors; ++t)
            if (th_support::check_pattern(p + t * piece(), piece(), th_support::pattern_seed(version, 0, t)) != piece())
                return false;
        return true;
    }
};

// --bytes S --tensors T, checked; --ready-offset SECONDS.
inline Payload payload_option(const th_support::Args &args) {
    Payload p{args.get_u64("bytes", 0), static_cast<unsigned>(args.get_u64("tensors", 4))};
    if (p.tensors == 0 || p.bytes == 0 || p.bytes % (4ull * p.tensors))
        throw std::runtime_error("--bytes must be a positive multiple of 4 x --tensors");
    return p;
}

}  // namespace th_cluster
