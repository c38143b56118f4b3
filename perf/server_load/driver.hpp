// Closed-loop load: each client thread has its own connection, through the
// client library's request path (th::Requests: a plain socket speaking NNG's
// REQ protocol over tcp:// and ipc://, as every tensorhub client's), sends
// one request, waits for the reply, checks it and sends the next, recording
// every round trip.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "requests.hpp"

namespace th_load {

struct Call {
    Kind kind = Kind::Resolve;
    uint64_t worker = 0;
    uint64_t request_id = 0;
    Bytes bytes;
};

// The n-th call of a client thread, or nullopt when that thread is done.
using MakeCall = std::function<std::optional<Call>(unsigned thread, uint64_t n)>;
// Empty when the reply is right; otherwise what is wrong.
using CheckReply = std::function<std::string(const Call &, const uint8_t *reply, size_t size)>;

struct RunStats {
    double seconds = 0;
    std::map<Kind, std::vector<float>> latency_us;  // every round trip, by kind
    uint64_t errors = 0;
    std::string first_error;
    uint64_t requests() const;
};

// Runs `threads` clients against url until each one's MakeCall says done or
// `seconds` (0: no limit) have passed. A request that gets no reply in 10 s
// counts as an error and ends its thread.
RunStats drive(const std::string &url, unsigned threads, double seconds, const MakeCall &make, const CheckReply &check);

// The q-quantile (0..1) of v (sorted in place).
double quantile(std::vector<float> &v, double q);

}  // namespace th_load
