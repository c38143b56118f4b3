// The UCX data plane of one process: a context and worker driven by an
// event-driven progress thread, a registration cache for published and
// destination buffers, endpoints to peers (with peer error handling) and
// reads of a peer's registered memory with completion callbacks.
//
// A read is pulled with active messages, not a one-sided GET: the reader asks
// (kReadRequest: which bytes, and the region's packed rkey as proof that it
// may read them), and the holder answers from its progress thread, in the
// request's handler, on the endpoint the request came on (kReadReply, the
// bytes). Over tcp and shared memory UCX emulates a GET on the target's CPU
// the same way, but inside UCX: when the target was paused meanwhile it
// answers on endpoints that have failed and aborts the process
// (docs/reliability.md). Here a failed answer is an error status returned to
// us. See docs/design.md, "Data plane".
//
// Threading: the worker runs in UCS_THREAD_MODE_MULTI. Only the progress thread
// calls ucp_worker_progress and answers reads; any thread may post reads.
// Completion callbacks and handlers run on the progress thread, inside UCX,
// and must be short, must not block and must not take mu_ (whose holders
// call into UCX).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <ucp/api/ucp.h>

#include "tensorhub/tensorhub.h"

namespace th {

class UcxWorker;

// A registered piece of memory and its packed remote key.
struct MemRegion {
    uintptr_t base = 0;
    uint64_t length = 0;
    th_mem_kind kind = TH_MEM_HOST;
    ucp_mem_h memh = nullptr;
    std::vector<uint8_t> rkey;
    ucp_context_h context = nullptr;
    ~MemRegion();
    bool contains(uintptr_t p, uint64_t n) const { return p >= base && p + n <= base + length; }
};
using RegionRef = std::shared_ptr<MemRegion>;

// Which of a peer's two endpoints an operation uses. Control words are read
// on an endpoint (over tcp, a connection) of their own: on the data one a
// read would wait behind every chunk already asked for, megabytes over tcp,
// and each hop of a replication chain would pay that wait twice. The answer
// to a read comes back on the same lane.
enum class Lane : uint8_t { Data = 0, Control = 1 };

// The endpoints to another worker. Fails (failed() true) on a peer error or
// when force-closed; every read still in flight then completes with an error.
class Peer {
  public:
    uint64_t worker_id() const { return worker_id_; }
    bool failed() const { return status_.load() != UCS_OK; }
    // Why the endpoint failed ("Endpoint timeout", "closed: no progress"...).
    std::string failure() const;
    // Failed because this process was paused, not because of the peer.
    bool dropped_by_pause() const;

  private:
    friend class UcxWorker;
    static void on_error(void *arg, ucp_ep_h ep, ucs_status_t status);
    // Force-closes the endpoints; returns the close requests still in
    // progress. With close false the endpoints are only forgotten (their
    // worker was set aside). Caller holds mu_.
    std::vector<void *> drop_endpoints(bool close);
    ucp_ep_h &lane(Lane l) { return eps_[static_cast<size_t>(l)]; }

    UcxWorker *worker_ = nullptr;
    uint64_t worker_id_ = 0;
    std::array<ucp_ep_h, 2> eps_{};     // by Lane
    ucp_worker_h ep_worker_ = nullptr;  // the UCX worker the endpoints belong to
    std::vector<uint8_t> address_;      // the peer's, as connected to
    // UCS_OK while usable; set once, by the error handler (progress thread,
    // which must not take mu_) or by a forced close.
    std::atomic<int> status_{UCS_OK};
    std::mutex mu_;
    std::mutex greeting_;  // held while its creator greets it (UcxWorker::greet)
};
using PeerRef = std::shared_ptr<Peer>;

// Called once per read with its final status, on the progress thread.
using ReadCallback = std::function<void(ucs_status_t)>;

// What the progress thread does after this process was paused (SIGSTOP, a
// debugger, a frozen VM) for longer than pause_ms: peers have given up on it
// and closed their endpoints, and the reads they had asked for are stale.
// The paused worker is never progressed again: it is set aside (leaked), a
// fresh worker takes its place, every endpoint of the old one fails, its
// reads still in flight complete with an error, the stale requests are not
// answered, and on_restart runs so that the owner registers the new address.
struct PauseRecovery {
    uint32_t pause_ms = 0;  // 0: never
    std::function<void(uint64_t paused_ms)> on_restart;
};

class UcxWorker {
  public:
    explicit UcxWorker(PauseRecovery pause = {});
    ~UcxWorker();
    UcxWorker(const UcxWorker &) = delete;
    UcxWorker &operator=(const UcxWorker &) = delete;

    // The packed worker address others connect to (a new one after a pause).
    // Right after this process was paused past pause_ms the progress thread
    // may not have noticed yet (it does at its next turn, within ~100 ms):
    // then this waits, up to a second, until it has put the fresh worker in
    // place, so that no peer is sent to the paused worker's address.
    std::vector<uint8_t> address();
    // How many times a pause made the worker start afresh.
    uint64_t restarts() const { return restarts_.load(); }

    // A registered region covering [ptr, ptr + n). Reuses a cached
    // registration that covers it; registers (and caches) otherwise.
    RegionRef register_memory(void *ptr, uint64_t n, th_mem_kind kind);

    // The endpoint to worker_id at address, created on first use. A failed
    // endpoint, or one to an older address of the worker (it was restarted),
    // is replaced by a new one.
    PeerRef peer(uint64_t worker_id, const std::vector<uint8_t> &address);
    // Force-closes the endpoint to a peer (a stalled source): in-flight reads
    // complete with an error.
    void close_peer(const PeerRef &peer, const std::string &why);

    // Reads n bytes at remote, in the peer's region whose packed rkey is
    // given, into local (host memory, or memory of local_region's kind), on
    // one lane of peer; cb runs once on completion. The holder answers a
    // range outside that region with UCS_ERR_INVALID_ADDR.
    void read(const PeerRef &peer, Lane lane, void *local, uint64_t n, const MemRegion *local_region, uint64_t remote,
              const std::vector<uint8_t> &rkey, ReadCallback cb);
    // Wakes the progress thread so posted operations move on.
    void wake();

    // Drops cached registrations starting at base that no replica uses any
    // more: call before freeing memory the library allocated.
    void forget_memory(const void *base);

    ucp_context_h context() const { return context_; }
    size_t registrations() const;

  private:
    friend class Peer;  // its error handler fails the reads in flight on it
    struct PendingRead;
    void progress_loop();
    // Creates a worker on context_ and returns it with its packed address.
    std::pair<ucp_worker_h, std::vector<uint8_t>> create_worker();
    // Puts a fresh worker in place of the current one (see PauseRecovery).
    void restart_after_pause(uint64_t paused_ms);
    // Waits until the progress thread has seen a pause that it has not seen
    // yet (see address()).
    void settle_pause();
    // Completes every read in flight on peer with status.
    void fail_reads(const Peer *peer, ucs_status_t status);
    // Completes the reads in flight that `which` picks with status; returns
    // how many.
    size_t fail_reads(const std::function<bool(const PendingRead &)> &which, ucs_status_t status);
    PendingRead *take_pending(uint64_t id);
    // One request and its answer (read() splits longer reads). It is queued
    // for the progress thread, which sends it (see outbox_).
    void read_piece(const PeerRef &peer, Lane lane, void *local, uint64_t n, const MemRegion *local_region,
                    uint64_t remote, const std::vector<uint8_t> &rkey, ReadCallback cb);
    struct Outgoing;
    // On the progress thread: sends what read_piece queued.
    void send_outbox();
    // Sends one queued request, or fails its read (cancel, or a failed peer).
    void send_request(Outgoing &o, bool cancel);
    // Runs a read's callback with its final status and frees it.
    static void finish(PendingRead *g, ucs_status_t status);
    // Has a new peer answer once on each lane before it is used.
    void greet(const PeerRef &p);
    // The region with this packed rkey that holds [p, p + n), if any.
    RegionRef served_region(uint64_t p, uint64_t n, const uint8_t *rkey, size_t rkey_len) const;
    static ucs_status_t on_read_request(void *arg, const void *header, size_t header_length, void *data, size_t length,
                                        const ucp_am_recv_param_t *param);
    static ucs_status_t on_read_reply(void *arg, const void *header, size_t header_length, void *data, size_t length,
                                      const ucp_am_recv_param_t *param);

    PauseRecovery pause_;
    ucp_context_h context_ = nullptr;
    std::atomic<ucp_worker_h> worker_{nullptr};
    std::thread progress_;
    std::atomic<bool> stop_{false};
    std::atomic<uint64_t> restarts_{0};
    // When the progress thread last began a turn of its loop (steady clock).
    std::atomic<std::chrono::steady_clock::rep> last_turn_{0};

    mutable std::mutex mu_;
    std::vector<uint8_t> address_;
    std::vector<ucp_worker_h> set_aside_;  // paused workers, never progressed again
    // Guards regions_ and is never held across a call into UCX, so that the
    // read handler may take it.
    mutable std::mutex regions_mu_;
    std::vector<RegionRef> regions_;
    std::unordered_map<uint64_t, PeerRef> peers_;

    // Requests posted by any thread, sent by the progress thread. The worker
    // lock is UCX's spinlock (the read handler answers from inside progress
    // and so takes it again): threads that posted reads themselves spun on
    // it while the progress thread answered, and on 2 cores shared by eight
    // processes that spinning took more CPU than the transfers.
    struct Request;
    struct Outgoing {
        PeerRef peer;
        Lane lane;
        Request *request;
    };
    std::mutex outbox_mu_;
    std::vector<Outgoing> outbox_;

    // Reads posted and not completed, by request id. The ids are random so
    // that a peer cannot guess one and answer a read it was not asked.
    std::mutex pending_mu_;
    std::unordered_map<uint64_t, PendingRead *> pending_;
    uint64_t id_state_ = 0;  // under pending_mu_
};

}  // namespace th
