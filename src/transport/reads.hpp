// Internal to src/transport: a read while it is in flight, and the data
// plane's active messages (the active-message read path).
#pragma once

#include <bit>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "transport/worker.hpp"

namespace th {

// The data plane's messages. Their fields have fixed sizes and both ends are
// little-endian; a request's payload is the region's packed rkey, a reply's
// is the bytes.
enum AmId : unsigned { kReadRequest = 1, kReadReply = 2, kWaitingRead = 3 };
static_assert(std::endian::native == std::endian::little, "the data plane's messages are little-endian");

struct ReadRequestHeader {
    uint64_t id;
    uint64_t remote;
    uint64_t length;
};

// A read of bytes the holder may not hold yet (WaitFor): its payload is the
// region's packed rkey (rkey_bytes), then the reader's packed worker address,
// to which the holder answers once it holds the bytes: the endpoint a request
// comes in on is only valid while its handler runs.
struct WaitingReadHeader {
    ReadRequestHeader read;
    uint64_t level_at;
    uint64_t gen_at;
    uint64_t generation;
    uint32_t need;
    uint32_t rkey_bytes;
};

struct ReadReplyHeader {
    uint64_t id;
    int32_t status;   // a ucs_status_t; UCS_OK: the payload is the bytes
    uint32_t offset;  // where the payload goes in the read (reads are < 4 GiB)
};

// Bounds on what a request may carry; anything larger is not a read of ours.
constexpr size_t kMaxRkey = 4096;
constexpr size_t kMaxAddress = 4096;  // a packed worker address
constexpr uint64_t kMaxRead = uint64_t{1} << 32;
// A read is asked for once, and the holder answers it in pieces of at most
// kMaxAnswer bytes, each at its offset. Over tcp UCX sends an eager message up
// to 128 KiB + 131 bytes straight from the registered buffer (zero-copy;
// longer ones are copied into its bounce buffers first), and one that fits a
// receive segment (UCX_TCP_RX_SEG_SIZE, 256 KiB as ucx_env.cpp sets it)
// reaches the reader's handler in place, copied once into the destination.
// Asking once per read rather than per piece sends a 4 MiB read's request
// once instead of 32 times (measured: fetch / raw GET 0.81-0.92 -> see
// perf/FETCH.md). One-sided reads are never split.
constexpr uint64_t kMaxAnswer = 128 << 10;
// Readers before split answers asked for pieces of at most this size and
// expect one answer each: requests up to it are answered whole.
constexpr uint64_t kAnsweredWhole = 192 << 10;

// The status a peer fails with when this process was paused (see
// PauseRecovery); UCX itself does not use it for endpoints.
constexpr ucs_status_t kDroppedByPause = UCS_ERR_TIMED_OUT;
// A waiting read's answer when the holder did not get its bytes within
// kMaxWait, or had no room to keep it (kMaxParked), or no way to answer it:
// the reader asks again later, as it would have without waiting.
constexpr ucs_status_t kNotYet = UCS_ERR_NO_PROGRESS;
constexpr auto kMaxWait = std::chrono::milliseconds(1000);
// How often the holder looks at its parked reads when nothing told it to.
constexpr auto kParkedLook = std::chrono::milliseconds(10);
constexpr size_t kMaxParked = 4096;
// Endpoints a holder keeps to readers it answers (answer_peer): at most this
// many, each closed once unused for kAnswerPeerIdle.
constexpr size_t kMaxAnswerPeers = 1024;
constexpr auto kAnswerPeerIdle = std::chrono::seconds(30);

// A read this process asked for and that has not completed.
struct UcxWorker::PendingRead {
    const Peer *peer;
    Engine *engine;       // the engine that posts it (its outstanding count)
    ucp_worker_h worker;  // the worker it was asked on
    void *local;
    uint64_t length;
    th_mem_kind kind;
    ReadCallback cb;
    bool pull;              // answered by the holder (Engine::pulls counts it)
    uint64_t received = 0;  // bytes of the answers in so far
};

// A read queued for an engine's thread to post.
struct UcxWorker::Outgoing {
    PeerRef peer;
    size_t slot;  // the peer's endpoint: a Lane, or a copy worker's (Peer::kLanes + i)
    uint64_t id;  // its PendingRead
    ReadRequestHeader header;
    std::optional<WaitFor> wait;
    std::vector<uint8_t> rkey;  // packed
    void *local;
    const MemRegion *local_region;  // may be null (unregistered host memory)
};

// A waiting read the holder does not hold the bytes of yet.
struct UcxWorker::Parked {
    WaitingReadHeader h;
    std::vector<uint8_t> rkey;
    std::string reader;  // its packed worker address (answer_peers_'s key)
    std::chrono::steady_clock::time_point until;
};

// An endpoint a holder made to a reader to answer its waiting reads.
struct UcxWorker::AnswerPeer {
    PeerRef peer;
    // The reader answered an empty read on it: over tcp, UCX 1.13 can fail an
    // endpoint that carries traffic while its sockets are being merged
    // (UcxWorker::greet), so answers wait for this.
    std::shared_ptr<std::atomic<int>> greeted;  // 1: not yet, 0: yes, -1: failed
    std::chrono::steady_clock::time_point used;
};

}  // namespace th
