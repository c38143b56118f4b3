// The UCX data plane of one process: a context and worker driven by an
// event-driven progress thread, the registration cache, the peers, and reads
// of a peer's registered memory with completion callbacks.
//
// Where the code lives: worker.cpp (context, worker, progress thread, pause
// recovery), registry.cpp (registrations), peer.cpp (endpoints, read path),
// read.cpp (the reader's side: GETs and read requests), serve.cpp (the
// holder's side: answering read requests), successions.cpp (copies that
// answer for the replica they were made from), ucx_env.cpp (UCX settings).
// UCX status codes stop here: callers see an error text or a th_status.
//
// Threading: the workers run in UCS_THREAD_MODE_MULTI. Each UCX worker (the
// main one, and the copy workers of UcxOptions::copy_threads) has a thread
// of its own (named th-progress, th-copy) that alone calls
// ucp_worker_progress on it and posts the reads
// queued to it (see Engine::outbox); any thread may ask for reads.
// Completion callbacks and handlers run on those threads, inside UCX, and
// must be short, must not block and must not take mu_ (whose holders call
// into UCX).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <ucp/api/ucp.h>

#include "tensorhub/tensorhub.h"
#include "transport/peer.hpp"
#include "transport/registry.hpp"
#include "transport/successions.hpp"

namespace th {

// The timer slack of the progress threads, whatever the process's: how much
// later than asked a nap between a holder's answers may end (the kernel's
// default).
constexpr unsigned long kProgressTimerSlackNs = 50'000;

struct ReadRequestHeader;
struct WaitingReadHeader;

// Called once per read, on the progress thread: nullptr when the bytes are in
// place, else a static text saying why not.
using ReadCallback = std::function<void(const char *error)>;
// The error of a read the holder refused because no replica of it serves
// that memory any more (it was released): the replica changed, the worker is
// fine. Compared by address.
extern const char *const kReadRefused;
// The error of a waiting read (WaitFor) whose bytes the holder did not get in
// time: nothing failed, the read may be asked for again. Compared by address.
extern const char *const kReadNotYet;
// The error of a read whose connection the holder's side closed: it gave up
// on reads of its own from this process, say (UCX pairs the endpoints two
// processes make to each other, and a close ends both), or it is gone.
// Compared by address.
extern const char *const kReadReset;

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

// A read of bytes the holder may not hold yet (a replica still filling):
// asked for ahead, it is answered as soon as the 32-bit fill level at
// level_at (in memory the holder exposes: the replica's control block)
// reaches need, and refused (kReadRefused) once the 64-bit word at gen_at is
// no longer generation (the replica changed). Neither the poll that would
// notice the bytes nor the request that would follow it then delays them.
// Active-message path only; a one-sided read ignores it. When the holder does
// not get the bytes in time, the read fails with kReadNotYet. Without park
// it is a guarded read (client/control_word.hpp): answered at once while the
// generation holds and the level is reached, else refused or "not yet" at
// once, never parked.
struct WaitFor {
    uint64_t level_at = 0;
    uint64_t gen_at = 0;
    uint64_t generation = 0;
    uint32_t need = 0;
    bool park = true;
};

struct UcxOptions {
    // UCX_TLS for this context only (tests pin a lane: "tcp", "sm"); empty:
    // the environment's or UCX's choice.
    std::string transports;
    // Threads that post one-sided reads into host memory, at least 1: the
    // progress thread and copy_threads - 1 copy workers, UCX workers of the
    // same context each progressed by a thread of its own, made when the
    // first peer is read one-sided. A peer's data read goes to the one with
    // the fewest reads outstanding. Over cma a read is copied by the thread
    // that posts it, so one thread caps a reader at one core's copy rate
    // (th_client_config.copy_threads).
    uint32_t copy_threads = 1;
};

class UcxWorker {
  public:
    explicit UcxWorker(PauseRecovery pause = {}, UcxOptions options = {});
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
    // Answers this process posted to read requests (active-message path).
    uint64_t answers_sent() const { return answers_sent_.load(); }

    // See Registry. expose: the rkey is handed to readers.
    RegionRef register_memory(void *ptr, uint64_t n, th_mem_kind kind, bool expose = false) {
        return registry_.register_memory(ptr, n, kind, expose);
    }
    size_t withdraw_unused() { return registry_.withdraw_unused(); }
    // Withdraws one exposed registration now (Registry::withdraw).
    bool withdraw(const RegionRef &region) { return registry_.withdraw(region.get()); }
    void forget_memory(const void *base) { registry_.forget(base); }
    size_t registrations() const { return registry_.size(); }

    // The endpoints to worker_id at address, created on first use. A failed
    // peer, or one at an older address of the worker (it was restarted), is
    // replaced by a new one.
    PeerRef peer(uint64_t worker_id, const std::vector<uint8_t> &address);
    // The same for several workers at once (a plan's sources): new ones are
    // greeted together, so connecting to K sources costs about one greeting's
    // round trips, not K. Each entry has its peer, or why there is none.
    using PeerAddress = std::pair<uint64_t, std::vector<uint8_t>>;
    struct PeerOrError {
        PeerRef peer;
        std::string error;
    };
    std::vector<PeerOrError> peers(const std::vector<PeerAddress> &wanted, const std::atomic<bool> *stop = nullptr);
    // Connects to workers ahead of need: creates the endpoints (together, as
    // peers() does) and waits, up to a second per lane, until they are wired
    // up, so that UCX has made its endpoint configuration for peers of that
    // kind (10-40 ms of CPU the first time, on both sides) before a fetch
    // waits on it. The endpoints stay for later use. Returns how many came
    // up in time. stop: set, it gives up waiting at once (the client is going
    // away) and returns 0.
    size_t connect_ahead(const std::vector<PeerAddress> &workers, const std::atomic<bool> *stop = nullptr);
    // Force-closes the endpoints to a peer (a stalled source): in-flight
    // reads complete with an error.
    void close_peer(const PeerRef &peer, const std::string &why);

    // Reads n bytes at remote, in the peer's region whose packed rkey is
    // given, into local (host memory, or memory of local_region's kind), on
    // one lane of peer; cb runs once on completion. On the active-message
    // path the holder refuses a range outside a region it serves.
    void read(const PeerRef &peer, Lane lane, void *local, uint64_t n, const MemRegion *local_region, uint64_t remote,
              const std::vector<uint8_t> &rkey, ReadCallback cb, std::optional<WaitFor> wait = std::nullopt);
    // Memory this process serves changed (a replica filled further): reads
    // waiting for it are looked at again.
    void served_memory_advanced() {
        if (parked_count_.load(std::memory_order_relaxed) == 0) return;
        parked_changed_ = true;
        wake();
    }
    // A copy of a replica answers the guarded reads of the replica's
    // generation once that ended, while the copy's holds (successions.hpp).
    void add_succession(Succession s) { successions_.add(std::move(s)); }
    // The copy's generation ended: it answers for nobody.
    void drop_successions_to(uint64_t to_gen_at, uint64_t to_generation) {
        successions_.drop_to(to_gen_at, to_generation);
    }
    size_t successions() const { return successions_.size(); }
    // Waiting reads this process answered once it held their bytes.
    uint64_t waiting_reads_answered() const { return waits_answered_.load(); }
    // Wakes the progress thread so posted operations move on.
    void wake();
    // The copy workers made so far (0 until a peer is read one-sided).
    size_t copy_workers() const { return copiers_up_.load() ? copiers_.size() : 0; }

    // "1.22.0 (one-sided reads)" or "1.13.1 (active-message reads)".
    static std::string describe_ucx();
    // A UCX context with tensorhub's settings (ucx_env.hpp) and options'
    // transports, as every worker's; the caller owns it (ucp_cleanup).
    static ucp_context_h create_context(const UcxOptions &options);

  private:
    friend class Peer;  // its error handler fails the reads in flight on it
    struct PendingRead;
    struct Outgoing;
    // A UCX worker and the thread that progresses it. Reads asked for by any
    // thread are queued to an engine and posted by its thread: the worker
    // lock is UCX's spinlock (the read handler answers from inside progress
    // and so takes it again), and threads that posted reads themselves spun
    // on it while the progress thread answered; on 2 cores shared by eight
    // processes that spinning took more CPU than the transfers. The UCX
    // worker is swapped only on the main engine, after a pause.
    struct Engine {
        std::atomic<ucp_worker_h> worker{nullptr};
        std::thread thread;
        std::mutex outbox_mu;
        std::vector<Outgoing> outbox;
        std::atomic<uint32_t> outstanding{0};  // reads queued or posted, not finished
        std::atomic<uint32_t> pulls{0};        // of them, those a holder answers (not one-sided)
    };

    // worker.cpp
    // Flushes every endpoint and progresses a little longer, until `until`
    // at most: at the worker's end, before its endpoints are force-closed,
    // on a UCX that aborts otherwise (ucx_env.hpp). Caller holds mu_.
    void flush_endpoints(std::chrono::steady_clock::time_point until);
    void progress_loop(Engine &e);
    std::pair<ucp_worker_h, std::vector<uint8_t>> create_worker(bool main);
    // Makes the copy workers once; false if UCX refused one (then there
    // are none, and every read is posted by the progress thread). Caller holds mu_.
    bool make_copiers();
    // peer.cpp
    void add_copy_endpoints(Peer &p, const ucp_ep_params_t &params);
    void restart_after_pause(uint64_t paused_ms);
    void settle_pause();
    PeerOrError connect(uint64_t worker_id, const std::vector<uint8_t> &address,
                        std::vector<std::unique_lock<std::mutex>> &greetings, std::vector<PeerRef> &to_greet);
    void greet(std::vector<PeerRef> ps, const std::atomic<bool> *stop);
    // Whether p's lanes are usable: greeted (active messages), or flushed
    // within a second (one-sided lanes, which wire up on first use).
    bool wired_up(const PeerRef &p, const std::atomic<bool> *stop);

    // read.cpp
    void fail_reads(const Peer *peer, ucs_status_t status);
    size_t fail_reads(const std::function<bool(const PendingRead &)> &which, ucs_status_t status);
    PendingRead *take_pending(uint64_t id);
    uint64_t add_pending(PendingRead *g);
    void read_piece(const PeerRef &peer, Lane lane, void *local, uint64_t n, const MemRegion *local_region,
                    uint64_t remote, const std::vector<uint8_t> &rkey, ReadCallback cb, std::optional<WaitFor> wait);
    size_t send_outbox(Engine &e);  // e's thread; how many reads it posted
    void send(Outgoing &o, bool cancel);
    void post_get(Outgoing &o, ucp_ep_h ep, ucp_rkey_h rkey);
    void post_request(Outgoing &o, ucp_ep_h ep);
    void complete(uint64_t id, ucs_status_t status);
    static void finish(PendingRead *g, ucs_status_t status);
    static ucs_status_t on_read_reply(void *arg, const void *header, size_t header_length, void *data, size_t length,
                                      const ucp_am_recv_param_t *param);
    PendingRead *place_answer(uint64_t id, uint64_t offset, const void *data, uint64_t length, ucs_status_t *st);
    // serve.cpp
    static ucs_status_t on_read_request(void *arg, const void *header, size_t header_length, void *data, size_t length,
                                        const ucp_am_recv_param_t *param);
    static ucs_status_t on_waiting_read(void *arg, const void *header, size_t header_length, void *data, size_t length,
                                        const ucp_am_recv_param_t *param);
    // Answers a read request on ep: the bytes, or why not.
    // guard: a waiting read's words, answered only while its generation
    // holds (a guarded read, client/control_word.hpp).
    void answer(ucp_ep_h ep, const ReadRequestHeader &h, const uint8_t *rkey, size_t rkey_len,
                const WaitingReadHeader *guard = nullptr);
    // Answers read `id` on ep with a status and no bytes.
    void answer_status(ucp_ep_h ep, uint64_t id, ucs_status_t status);
    // Progress thread, each turn of its loop: looks at the parked reads when
    // something they wait for may have changed (parked_changed_: a read was
    // parked, the holder filled further, an answer endpoint was greeted), and
    // every kParkedLook anyway (a replica released, a read's time up).
    void look_at_parked(std::chrono::steady_clock::time_point now);
    // Answers the parked reads whose bytes are here now or whose time is up,
    // and closes the answer endpoints nobody uses.
    void answer_parked();
    // Progress thread: the endpoint to the reader at address, made and
    // greeted on first use; nullptr while it is not greeted yet or when it
    // cannot be had.
    PeerRef answer_peer(const std::string &address, bool *failed);
    // Progress thread: drops the parked reads and the answer endpoints
    // (closing them, or only forgetting those of a set-aside worker).
    void drop_answer_peers(bool close);
    struct Parked;
    struct AnswerPeer;
    std::mutex parked_mu_;  // guards parked_; never held into UCX
    std::vector<Parked> parked_;
    // The progress thread's only:
    std::unordered_map<std::string, AnswerPeer> answer_peers_;  // by the reader's packed address
    std::vector<void *> answer_closes_;  // close requests of answer endpoints, freed once done
    std::chrono::steady_clock::time_point last_sweep_{}, next_look_{};
    std::atomic<bool> parked_changed_{false};
    // Refused reads are logged at most once a second (answer()).
    std::atomic<std::chrono::steady_clock::rep> refusal_logged_{0};
    std::atomic<uint64_t> refusals_unlogged_{0};
    std::atomic<size_t> parked_count_{0};
    std::atomic<uint64_t> waits_answered_{0};
    // This worker's packed address, for the waiting reads it asks for
    // (progress thread, which alone replaces it).
    const std::vector<uint8_t> &own_address() const { return address_; }

    PauseRecovery pause_;
    UcxOptions options_;
    ucp_context_h context_ = nullptr;
    bool one_sided_ = false;  // this UCX keeps zero-copy GETs under peer error handling
    // Every lane's endpoints, the holder's side, pause recovery. The
    // progress thread is its thread.
    Engine main_;
    // options_.copy_threads - 1 of them, made once under mu_ and never
    // changed after copiers_up_ is set (then read without a lock).
    std::vector<std::unique_ptr<Engine>> copiers_;
    std::atomic<bool> copiers_up_{false};
    bool copiers_tried_ = false;  // under mu_
    std::atomic<bool> stop_{false};
    std::atomic<uint64_t> restarts_{0};
    std::atomic<uint64_t> answers_sent_{0};
    // When the progress thread last began a turn of its loop (steady clock).
    std::atomic<std::chrono::steady_clock::rep> last_turn_{0};

    mutable std::mutex mu_;
    std::vector<uint8_t> address_;
    std::vector<ucp_worker_h> set_aside_;  // paused workers, never progressed again
    std::unordered_map<uint64_t, PeerRef> peers_;
    Registry registry_;
    Successions successions_;

    // Reads posted and not completed, by id. The ids are random so that a
    // peer cannot guess one and answer a read it was not asked.
    std::mutex pending_mu_;
    std::unordered_map<uint64_t, PendingRead *> pending_;
    uint64_t id_state_ = 0;  // under pending_mu_
};

}  // namespace th
