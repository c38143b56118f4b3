// The UCX data plane of one process: a context and worker driven by an
// event-driven progress thread, a registration cache for published and
// destination buffers, endpoints to peers (with peer error handling) and
// one-sided GETs with completion callbacks.
//
// Threading: the worker runs in UCS_THREAD_MODE_MULTI. Only the progress thread
// calls ucp_worker_progress; any thread may post GETs. Completion callbacks run
// on the progress thread and must be short and must not block.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
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
// and each hop of a replication chain would pay that wait twice.
enum class Lane : uint8_t { Data = 0, Control = 1 };

// The endpoints to another worker. Fails (failed() true) on a peer error or
// when force-closed; every GET still in flight then completes with an error.
class Peer {
  public:
    ~Peer();
    uint64_t worker_id() const { return worker_id_; }
    bool failed() const { return status_.load() != UCS_OK; }
    // Why the endpoint failed ("Endpoint timeout", "closed: no progress"...).
    std::string failure() const;
    // Failed because this process was paused, not because of the peer.
    bool dropped_by_pause() const;
    // The unpacked remote key for a packed rkey of this peer, for use on
    // one lane (cached).
    ucp_rkey_h rkey(const std::vector<uint8_t> &packed, Lane lane = Lane::Data);

  private:
    friend class UcxWorker;
    struct Endpoint {
        ucp_ep_h ep = nullptr;
        std::map<std::vector<uint8_t>, ucp_rkey_h> rkeys;  // unpacked on ep
    };
    static void on_error(void *arg, ucp_ep_h ep, ucs_status_t status);
    // Destroys the rkeys and force-closes the endpoints; returns the close
    // requests still in progress. With close false the endpoints are only
    // forgotten (their worker was set aside). Caller holds mu_.
    std::vector<void *> drop_endpoints(bool close);
    Endpoint &lane(Lane l) { return eps_[static_cast<size_t>(l)]; }

    UcxWorker *worker_ = nullptr;
    uint64_t worker_id_ = 0;
    std::array<Endpoint, 2> eps_;       // by Lane
    ucp_worker_h ep_worker_ = nullptr;  // the UCX worker the endpoints belong to
    std::vector<uint8_t> address_;      // the peer's, as connected to
    // UCS_OK while usable; set once, by the error handler (progress thread,
    // which must not take mu_) or by a forced close.
    std::atomic<int> status_{UCS_OK};
    std::mutex mu_;
};
using PeerRef = std::shared_ptr<Peer>;

// Called once per GET with its final status, on the progress thread.
using GetCallback = std::function<void(ucs_status_t)>;

// What the progress thread does after this process was paused (SIGSTOP, a
// debugger, a frozen VM) for longer than pause_ms: peers have given up on it
// and closed their endpoints, and over tcp UCX would answer the GETs they had
// queued on those closed connections, which aborts the process inside UCX.
// So the paused worker is never progressed again: it is set aside (leaked),
// a fresh worker takes its place, every endpoint of the old one fails, its
// GETs still in flight complete with an error, and on_restart runs so that
// the owner registers the new address.
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
    std::vector<uint8_t> address() const;
    // How many times a pause made the worker start afresh.
    uint64_t restarts() const { return restarts_.load(); }

    // A registered region covering [ptr, ptr + n). Reuses a cached
    // registration that covers it; registers (and caches) otherwise.
    RegionRef register_memory(void *ptr, uint64_t n, th_mem_kind kind);

    // The endpoint to worker_id at address, created on first use. A failed
    // endpoint, or one to an older address of the worker (it was restarted),
    // is replaced by a new one.
    PeerRef peer(uint64_t worker_id, const std::vector<uint8_t> &address);
    // Force-closes the endpoint to a peer (a stalled source): in-flight GETs
    // complete with an error.
    void close_peer(const PeerRef &peer, const std::string &why);

    // Posts GET of n bytes at remote into local on one lane of peer (rkey
    // unpacked for that lane); cb runs once on completion.
    void get(const PeerRef &peer, Lane lane, void *local, uint64_t n, const MemRegion *local_region, uint64_t remote,
             ucp_rkey_h rkey, GetCallback cb);
    // Wakes the progress thread so posted operations move on.
    void wake();

    // Drops cached registrations starting at base that no replica uses any
    // more: call before freeing memory the library allocated.
    void forget_memory(const void *base);

    ucp_context_h context() const { return context_; }
    size_t registrations() const;

  private:
    struct PendingGet;
    void progress_loop();
    // Creates a worker on context_ and returns it with its packed address.
    std::pair<ucp_worker_h, std::vector<uint8_t>> create_worker();
    // Puts a fresh worker in place of the current one (see PauseRecovery).
    void restart_after_pause(uint64_t paused_ms);
    bool take_pending(PendingGet *g);
    static void on_get_done(void *request, ucs_status_t status, void *user_data);

    PauseRecovery pause_;
    ucp_context_h context_ = nullptr;
    std::atomic<ucp_worker_h> worker_{nullptr};
    std::thread progress_;
    std::atomic<bool> stop_{false};
    std::atomic<uint64_t> restarts_{0};

    mutable std::mutex mu_;
    std::vector<uint8_t> address_;
    std::vector<ucp_worker_h> set_aside_;  // paused workers, never progressed again
    std::vector<RegionRef> regions_;
    std::unordered_map<uint64_t, PeerRef> peers_;

    // GETs posted and not completed, so that a restart can complete them.
    std::mutex pending_mu_;
    std::unordered_map<PendingGet *, ucp_worker_h> pending_;
};

}  // namespace th
