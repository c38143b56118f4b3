#include "transport/ucx.hpp"

#include <poll.h>
#include <sys/random.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>

#include "common/error.hpp"
#include "common/log.hpp"
#include "transport/memory_kind.hpp"

namespace th {

namespace {

void check(ucs_status_t st, const char *what) {
    if (st != UCS_OK) fail(TH_ERR_TRANSPORT, what, ": ", ucs_status_string(st));
}

// Registrations with no user left are kept (a later version is often
// published from the same buffers) up to this many.
constexpr size_t kMaxIdleRegions = 64;

// The status a peer fails with when this process was paused (see
// PauseRecovery); UCX itself does not use it for endpoints.
constexpr ucs_status_t kDroppedByPause = UCS_ERR_TIMED_OUT;

}  // namespace

// The data plane's two messages. Their fields have fixed sizes and both ends
// are little-endian (checked below); a request's payload is the region's
// packed rkey, a reply's is the bytes.
enum AmId : unsigned { kReadRequest = 1, kReadReply = 2 };
static_assert(std::endian::native == std::endian::little, "the data plane's messages are little-endian");

struct ReadRequestHeader {
    uint64_t id;
    uint64_t remote;
    uint64_t length;
};

struct ReadReplyHeader {
    uint64_t id;
    int32_t status;  // a ucs_status_t; UCS_OK: the payload is the bytes
    uint32_t pad;
};

namespace {

// Bounds on what a request may carry; anything larger is not a read of ours.
constexpr size_t kMaxRkey = 4096;
// The most one answer carries: a read of more is asked for in pieces. Over
// tcp an answer that fits one receive segment (UCX_TCP_RX_SEG_SIZE, 256 KiB
// as set below) reaches the reader's handler in place; a longer one is first
// reassembled by UCX into memory it allocates, one more copy of every byte
// (and fresh pages to fault in), which made an 8-reader chain CPU-bound.
constexpr uint64_t kMaxAnswer = 192 << 10;
constexpr uint64_t kMaxRead = uint64_t{1} << 32;

bool same_bytes(const std::vector<uint8_t> &a, const uint8_t *b, size_t n) {
    if (a.size() != n) return false;
    uint8_t diff = 0;  // constant time: the rkey is what authorises the read
    for (size_t i = 0; i < n; i++) diff |= a[i] ^ b[i];
    return diff == 0;
}

// An answer being sent: what must live until UCX is done.
struct Answer {
    ReadReplyHeader header;
    RegionRef region;
};

}  // namespace

// A request being sent: what must live until UCX is done.
struct UcxWorker::Request {
    UcxWorker *owner;
    ReadRequestHeader header;
    std::vector<uint8_t> rkey;
};

// A read this process asked for and has no answer to yet.
struct UcxWorker::PendingRead {
    const Peer *peer;
    ucp_worker_h worker;  // the worker it was asked on
    void *local;
    uint64_t length;
    th_mem_kind kind;
    ReadCallback cb;
};

MemRegion::~MemRegion() {
    if (memh != nullptr) ucp_mem_unmap(context, memh);
}

std::vector<void *> Peer::drop_endpoints(bool close) {
    std::vector<void *> closing;
    for (ucp_ep_h &ep : eps_) {
        if (ep != nullptr && close) {
            ucp_request_param_t prm{};
            prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
            prm.flags = UCP_EP_CLOSE_FLAG_FORCE;
            void *req = ucp_ep_close_nbx(ep, &prm);
            if (UCS_PTR_IS_PTR(req)) closing.push_back(req);
        }
        ep = nullptr;
    }
    return closing;
}

void Peer::on_error(void *arg, ucp_ep_h, ucs_status_t status) {
    auto *p = static_cast<Peer *>(arg);
    int expected = UCS_OK;
    if (p->status_.compare_exchange_strong(expected, status))
        TH_LOG(Info, "peer ", p->worker_id_, " failed: ", ucs_status_string(status));
    p->worker_->fail_reads(p, status);
}

bool Peer::dropped_by_pause() const { return status_.load() == kDroppedByPause; }

std::string Peer::failure() const {
    int st = status_.load();
    if (st == UCS_ERR_CANCELED) return "closed after it stopped making progress";
    if (st == kDroppedByPause) return "dropped: this process was paused";
    return ucs_status_string(static_cast<ucs_status_t>(st));
}

UcxWorker::UcxWorker(PauseRecovery pause) : pause_(std::move(pause)) {
    // Larger TCP segments roughly double GET throughput over tcp (measured on
    // loopback: ~1.3 -> ~2.5 GB/s). UCX reads transport settings from the
    // environment only, so they are set there, once, unless the user set them.
    static std::once_flag tuned;
    std::call_once(tuned, [] {
        setenv("UCX_TCP_TX_SEG_SIZE", "64K", /*overwrite=*/0);
        setenv("UCX_TCP_RX_SEG_SIZE", "256K", 0);
    });
    ucp_config_t *config = nullptr;
    check(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
    // Two threads share the worker (the progress thread and the caller's).
    // The read handler answers from inside ucp_worker_progress, so it takes
    // the worker's lock a second time: that needs UCX's (recursive) spinlock;
    // UCX's mutex is not recursive and would deadlock.
    if (ucp_config_modify(config, "USE_MT_MUTEX", "n") != UCS_OK) {
        ucp_config_release(config);
        fail(TH_ERR_TRANSPORT, "could not make UCX use its recursive worker lock");
    }
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    // RMA for registrations whose rkeys a fabric with remote memory access
    // would need; reads themselves are active messages.
    params.features = UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
    params.mt_workers_shared = 1;
    ucs_status_t st = ucp_init(&params, config, &context_);
    ucp_config_release(config);
    check(st, "ucp_init");

    try {
        auto [w, addr] = create_worker();
        worker_ = w;
        address_ = std::move(addr);
    } catch (...) {
        ucp_cleanup(context_);
        throw;
    }
    last_turn_ = std::chrono::steady_clock::now().time_since_epoch().count();
    progress_ = std::thread([this] { progress_loop(); });
}

std::pair<ucp_worker_h, std::vector<uint8_t>> UcxWorker::create_worker() {
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_MULTI;
    ucp_worker_h w = nullptr;
    check(ucp_worker_create(context_, &wp, &w), "ucp_worker_create");
    ucp_address_t *addr = nullptr;
    size_t len = 0;
    ucs_status_t st = ucp_worker_get_address(w, &addr, &len);
    if (st != UCS_OK) {
        ucp_worker_destroy(w);
        check(st, "ucp_worker_get_address");
    }
    std::vector<uint8_t> packed(reinterpret_cast<uint8_t *>(addr), reinterpret_cast<uint8_t *>(addr) + len);
    ucp_worker_release_address(w, addr);
    for (auto [id, cb] : {std::pair{kReadRequest, &UcxWorker::on_read_request}, std::pair{kReadReply, &UcxWorker::on_read_reply}}) {
        ucp_am_handler_param_t hp{};
        hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS | UCP_AM_HANDLER_PARAM_FIELD_CB |
                        UCP_AM_HANDLER_PARAM_FIELD_ARG;
        hp.id = id;
        hp.flags = UCP_AM_FLAG_WHOLE_MSG;
        hp.cb = cb;
        hp.arg = this;
        st = ucp_worker_set_am_recv_handler(w, &hp);
        if (st != UCS_OK) {
            ucp_worker_destroy(w);
            check(st, "ucp_worker_set_am_recv_handler");
        }
    }
    return {w, std::move(packed)};
}

UcxWorker::~UcxWorker() {
    {
        std::lock_guard lk(mu_);
        for (auto &[id, p] : peers_) {
            std::lock_guard plk(p->mu_);
            for (void *req : p->drop_endpoints(/*close=*/true)) {
                while (ucp_request_check_status(req) == UCS_INPROGRESS) ucp_worker_progress(worker_);
                ucp_request_free(req);
            }
        }
        peers_.clear();
    }
    stop_ = true;
    ucp_worker_signal(worker_);
    progress_.join();
    for (Outgoing &o : outbox_) send_request(o, /*cancel=*/true);
    outbox_.clear();
    {
        std::lock_guard lk(regions_mu_);
        regions_.clear();
    }
    ucp_worker_destroy(worker_);
    // A set-aside worker is never touched again: destroying it would progress
    // the very requests whose answer aborts. Its context stays with it.
    if (set_aside_.empty()) ucp_cleanup(context_);
}

void UcxWorker::progress_loop() {
    int efd = -1;
    auto get_efd = [&] {
        if (ucp_worker_get_efd(worker_, &efd) != UCS_OK) {
            TH_LOG(Error, "ucp_worker_get_efd failed; progress thread polls");
            efd = -1;
        }
    };
    get_efd();
    // After the last completion keep polling a little before sleeping: over
    // tcp the data of one GET arrives in 64 KiB segments some 15 us apart, and
    // arming the event fd, sleeping and waking for each of them costs more
    // than the polling (measured: reader throughput 3.0 -> 4.2 GB/s). Only
    // while events come that fast, though: on a slower link (segments 500 us
    // apart at 1 gbit) the polling would burn a tenth of a core per process
    // for nothing, which many processes sharing few cores cannot afford.
    constexpr auto kSpin = std::chrono::microseconds(100);
    auto last_busy = std::chrono::steady_clock::now();
    bool spin = true;
    // Every turn of the loop is short (a progress call, or a poll of at most
    // 100 ms), so a long gap between two turns means the process was paused.
    const auto pause_limit = std::chrono::milliseconds(pause_.pause_ms);
    auto turn = std::chrono::steady_clock::now();
    while (!stop_.load(std::memory_order_relaxed)) {
        auto now = std::chrono::steady_clock::now();
        if (pause_.pause_ms > 0 && now - turn > pause_limit) {
            restart_after_pause(std::chrono::duration_cast<std::chrono::milliseconds>(now - turn).count());
            get_efd();
            now = last_busy = std::chrono::steady_clock::now();
        }
        turn = now;
        last_turn_.store(now.time_since_epoch().count(), std::memory_order_relaxed);
        send_outbox();
        if (ucp_worker_progress(worker_) != 0) {
            while (ucp_worker_progress(worker_) != 0) {
            }
            last_busy = std::chrono::steady_clock::now();
            continue;
        }
        if (spin && std::chrono::steady_clock::now() - last_busy < kSpin) continue;
        if (efd < 0) {
            std::this_thread::sleep_for(std::chrono::microseconds(50));
            continue;
        }
        {
            std::lock_guard lk(outbox_mu_);
            if (!outbox_.empty()) continue;
        }
        ucs_status_t st = ucp_worker_arm(worker_);
        if (st == UCS_ERR_BUSY) continue;
        pollfd pfd{efd, POLLIN, 0};
        auto slept_from = std::chrono::steady_clock::now();
        // The timeout only bounds how late a missed wake-up can be noticed.
        poll(&pfd, 1, 100);
        last_busy = std::chrono::steady_clock::now();
        spin = last_busy - slept_from < kSpin;
    }
}

void UcxWorker::restart_after_pause(uint64_t paused_ms) {
    ucp_worker_h fresh = nullptr;
    std::vector<uint8_t> address;
    try {
        std::tie(fresh, address) = create_worker();
    } catch (const std::exception &e) {
        // Progressing the paused worker could abort the process; without a
        // fresh one this process can no longer serve or read, but lives on.
        TH_LOG(Error, "this process was paused for ", paused_ms, " ms and could not start a new UCX worker: ", e.what());
        while (!stop_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        return;
    }
    ucp_worker_h paused = nullptr;
    std::vector<PeerRef> dropped;
    {
        std::lock_guard lk(mu_);
        paused = worker_.exchange(fresh);
        address_ = std::move(address);
        set_aside_.push_back(paused);
        for (auto &[id, p] : peers_) dropped.push_back(p);
        peers_.clear();
    }
    for (const PeerRef &p : dropped) {
        std::lock_guard plk(p->mu_);
        int expected = UCS_OK;
        p->status_.compare_exchange_strong(expected, kDroppedByPause);
        p->drop_endpoints(/*close=*/false);  // they belong to the set-aside worker
    }
    size_t orphans = fail_reads([paused](const PendingRead &g) { return g.worker == paused; }, kDroppedByPause);
    restarts_++;
    TH_LOG(Warn, "this process was paused for ", paused_ms, " ms: its peers have given up on it, so its ", dropped.size(),
           " UCX endpoint(s) and ", orphans, " read(s) in flight were dropped and a new UCX worker took over");
    if (pause_.on_restart) pause_.on_restart(paused_ms);
}

void UcxWorker::wake() { ucp_worker_signal(worker_); }

std::vector<uint8_t> UcxWorker::address() {
    settle_pause();
    std::lock_guard lk(mu_);
    return address_;
}

void UcxWorker::settle_pause() {
    using namespace std::chrono;
    if (pause_.pause_ms == 0 || std::this_thread::get_id() == progress_.get_id()) return;
    auto unseen = [this] {
        auto last = steady_clock::time_point(steady_clock::duration(last_turn_.load(std::memory_order_relaxed)));
        return steady_clock::now() - last > milliseconds(pause_.pause_ms);
    };
    if (!unseen()) return;
    uint64_t seen = restarts_.load();
    wake();  // out of its poll: its next turn sees the pause
    auto until = steady_clock::now() + seconds(1);
    while (unseen() && restarts_.load() == seen && steady_clock::now() < until) std::this_thread::sleep_for(milliseconds(1));
}

RegionRef UcxWorker::register_memory(void *ptr, uint64_t n, th_mem_kind kind) {
    if (ptr == nullptr || n == 0) fail(TH_ERR_INVALID_ARG, "cannot register a null or empty buffer");
    auto p = reinterpret_cast<uintptr_t>(ptr);
    std::lock_guard lk(mu_);  // one registration at a time
    {
        std::lock_guard rlk(regions_mu_);
        for (auto &r : regions_)
            if (r->kind == kind && r->contains(p, n)) return r;
    }
    check_memory_kind(ptr, kind);
    auto r = std::make_shared<MemRegion>();
    r->base = p;
    r->length = n;
    r->kind = kind;
    r->context = context_;
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                    UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
    mp.address = ptr;
    mp.length = n;
    mp.memory_type = kind == TH_MEM_CUDA ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
    ucs_status_t st = ucp_mem_map(context_, &mp, &r->memh);
    if (st != UCS_OK)
        fail(TH_ERR_TRANSPORT, "cannot register ", n, " bytes of ", kind == TH_MEM_CUDA ? "CUDA" : "host",
             " memory with UCX: ", ucs_status_string(st),
             kind == TH_MEM_CUDA ? " (is UCX built with CUDA support?)" : "");
    void *buf = nullptr;
    size_t len = 0;
    check(ucp_rkey_pack(context_, r->memh, &buf, &len), "ucp_rkey_pack");
    r->rkey.assign(static_cast<uint8_t *>(buf), static_cast<uint8_t *>(buf) + len);
    ucp_rkey_buffer_release(buf);
    std::vector<RegionRef> evicted;  // unmapped after regions_mu_ is released
    std::lock_guard rlk(regions_mu_);
    // Drop idle registrations beyond the cap, oldest first.
    size_t idle = std::count_if(regions_.begin(), regions_.end(), [](auto &x) { return x.use_count() == 1; });
    for (auto it = regions_.begin(); idle >= kMaxIdleRegions && it != regions_.end();) {
        if (it->use_count() == 1) {
            evicted.push_back(std::move(*it));
            it = regions_.erase(it);
            --idle;
        } else {
            ++it;
        }
    }
    regions_.push_back(r);
    return r;
}

void UcxWorker::forget_memory(const void *base) {
    auto p = reinterpret_cast<uintptr_t>(base);
    std::vector<RegionRef> forgotten;  // unmapped after regions_mu_ is released
    std::lock_guard lk(regions_mu_);
    for (auto it = regions_.begin(); it != regions_.end();) {
        if ((*it)->base == p && it->use_count() == 1) {
            forgotten.push_back(std::move(*it));
            it = regions_.erase(it);
        } else {
            ++it;
        }
    }
}

size_t UcxWorker::registrations() const {
    std::lock_guard lk(regions_mu_);
    return regions_.size();
}

RegionRef UcxWorker::served_region(uint64_t p, uint64_t n, const uint8_t *rkey, size_t rkey_len) const {
    std::lock_guard lk(regions_mu_);
    for (const RegionRef &r : regions_)
        if (r->contains(p, n) && same_bytes(r->rkey, rkey, rkey_len)) return r;
    return nullptr;
}

PeerRef UcxWorker::peer(uint64_t worker_id, const std::vector<uint8_t> &address) {
    PeerRef p;
    std::unique_lock<std::mutex> greeting;
    {
        std::lock_guard lk(mu_);
        auto it = peers_.find(worker_id);
        if (it != peers_.end() && !it->second->failed() && it->second->address_ == address) {
            p = it->second;
        } else {
            p = std::make_shared<Peer>();
            p->worker_ = this;
            p->worker_id_ = worker_id;
            p->address_ = address;
            ucp_ep_params_t ep{};
            ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                            UCP_EP_PARAM_FIELD_ERR_HANDLER;
            ep.address = reinterpret_cast<const ucp_address_t *>(address.data());
            ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
            ep.err_handler.cb = &Peer::on_error;
            ep.err_handler.arg = p.get();
            p->ep_worker_ = worker_;
            for (ucp_ep_h &e : p->eps_) {
                ucs_status_t st = ucp_ep_create(p->ep_worker_, &ep, &e);
                if (st != UCS_OK) {
                    for (void *req : p->drop_endpoints(/*close=*/true)) ucp_request_free(req);
                    fail(TH_ERR_TRANSPORT, "cannot connect to worker ", worker_id, ": ", ucs_status_string(st));
                }
            }
            greeting = std::unique_lock(p->greeting_);
            if (it != peers_.end()) {
                // The failed (or outdated) endpoints stay referenced by
                // whoever still uses them; close them.
                PeerRef old = it->second;
                it->second = p;
                std::lock_guard plk(old->mu_);
                for (void *req : old->drop_endpoints(/*close=*/true)) ucp_request_free(req);
            } else {
                peers_.emplace(worker_id, p);
            }
        }
    }
    if (greeting.owns_lock()) {
        greet(p);
        return p;
    }
    std::lock_guard wait(p->greeting_);  // until whoever created it has greeted it
    return p;
}

// Over tcp each side of an endpoint connects a socket of its own, the peer
// its side when it first answers, and UCX (1.13) merges the two. A request
// that arrives while the merge is under way can be read from a socket UCX has
// just handed over: it logs "recv(-1) failed" and fails the endpoint. So the
// peer answers one empty read on each lane, one lane at a time, before any
// other traffic; a peer that does not answer in time is left to the reads'
// own deadlines.
void UcxWorker::greet(const PeerRef &p) {
    constexpr auto kGreetLimit = std::chrono::milliseconds(1000);
    auto until = std::chrono::steady_clock::now() + kGreetLimit;
    for (Lane l : {Lane::Data, Lane::Control}) {
        auto answered = std::make_shared<std::atomic<int>>(1);  // 1: not yet
        read(p, l, nullptr, 0, nullptr, 0, {}, [answered](ucs_status_t st) { answered->store(st == UCS_OK ? 0 : -1); });
        ucp_worker_signal(worker_);
        while (answered->load() == 1 && std::chrono::steady_clock::now() < until)
            std::this_thread::sleep_for(std::chrono::microseconds(50));
        if (answered->load() != 0) {
            TH_LOG(Info, "worker ", p->worker_id_, " did not answer a first read within ",
                   kGreetLimit.count(), " ms", answered->load() < 0 ? " (failed)" : "");
            return;
        }
    }
}

void UcxWorker::close_peer(const PeerRef &peer, const std::string &why) {
    if (!peer) return;
    int expected = UCS_OK;
    if (peer->status_.compare_exchange_strong(expected, UCS_ERR_CANCELED))
        TH_LOG(Info, "closing endpoint to worker ", peer->worker_id_, ": ", why);
    {
        std::lock_guard lk(mu_);
        std::lock_guard plk(peer->mu_);
        for (void *req : peer->drop_endpoints(/*close=*/true)) ucp_request_free(req);
        auto it = peers_.find(peer->worker_id_);
        if (it != peers_.end() && it->second == peer) peers_.erase(it);
    }
    fail_reads(peer.get(), UCS_ERR_CANCELED);
    ucp_worker_signal(worker_);
}

// ---- Reading: the reader's side -------------------------------------------

// Whoever takes a read out of pending_ completes it: its answer, a failure
// of its endpoint, or a restart that sets its worker aside.
UcxWorker::PendingRead *UcxWorker::take_pending(uint64_t id) {
    std::lock_guard lk(pending_mu_);
    auto it = pending_.find(id);
    if (it == pending_.end()) return nullptr;
    PendingRead *g = it->second;
    pending_.erase(it);
    return g;
}

size_t UcxWorker::fail_reads(const std::function<bool(const PendingRead &)> &which, ucs_status_t status) {
    std::vector<PendingRead *> failed;
    {
        std::lock_guard lk(pending_mu_);
        for (auto it = pending_.begin(); it != pending_.end();) {
            if (!which(*it->second)) {
                ++it;
                continue;
            }
            failed.push_back(it->second);
            it = pending_.erase(it);
        }
    }
    for (PendingRead *g : failed) finish(g, status);
    return failed.size();
}

void UcxWorker::finish(PendingRead *g, ucs_status_t status) {
    g->cb(status);
    delete g;
}

void UcxWorker::fail_reads(const Peer *peer, ucs_status_t status) {
    fail_reads([peer](const PendingRead &g) { return g.peer == peer; }, status);
}

void UcxWorker::read(const PeerRef &peer, Lane lane, void *local, uint64_t n, const MemRegion *local_region,
                     uint64_t remote, const std::vector<uint8_t> &rkey, ReadCallback cb) {
    if (n <= kMaxAnswer) return read_piece(peer, lane, local, n, local_region, remote, rkey, std::move(cb));
    // Several answers; cb runs once, when the last is in, with the first
    // failure if any.
    struct Parts {
        std::atomic<uint64_t> left;
        std::atomic<int> status{UCS_OK};
        ReadCallback cb;
    };
    auto parts = std::make_shared<Parts>();
    parts->left = (n + kMaxAnswer - 1) / kMaxAnswer;
    parts->cb = std::move(cb);
    for (uint64_t off = 0; off < n; off += kMaxAnswer) {
        read_piece(peer, lane, static_cast<uint8_t *>(local) + off, std::min(kMaxAnswer, n - off), local_region,
                   remote + off, rkey, [parts](ucs_status_t st) {
                       int ok = UCS_OK;
                       if (st != UCS_OK) parts->status.compare_exchange_strong(ok, st);
                       if (parts->left.fetch_sub(1) == 1) parts->cb(static_cast<ucs_status_t>(parts->status.load()));
                   });
    }
}

void UcxWorker::read_piece(const PeerRef &peer, Lane lane, void *local, uint64_t n, const MemRegion *local_region,
                           uint64_t remote, const std::vector<uint8_t> &rkey, ReadCallback cb) {
    if (peer->failed()) {
        cb(UCS_ERR_CONNECTION_RESET);
        return;
    }
    auto *g = new PendingRead{peer.get(), peer->ep_worker_, local, n,
                              local_region != nullptr ? local_region->kind : TH_MEM_HOST, std::move(cb)};
    uint64_t id = 0;
    {
        std::lock_guard lk(pending_mu_);
        do {
            // Random, so that no peer can guess the id of a read it was not
            // asked and answer it; 0 is never used.
            if (getrandom(&id, sizeof id, 0) != sizeof id) id = ++id_state_ * 0x9E3779B97F4A7C15ull;
        } while (id == 0 || !pending_.emplace(id, g).second);
    }
    bool was_empty;
    {
        std::lock_guard lk(outbox_mu_);
        was_empty = outbox_.empty();
        outbox_.push_back(Outgoing{peer, lane, new Request{this, ReadRequestHeader{id, remote, n}, rkey}});
    }
    // The progress thread sends it; one wake-up per batch it has not seen.
    if (was_empty) ucp_worker_signal(worker_);
}

void UcxWorker::send_outbox() {
    std::vector<Outgoing> batch;
    {
        std::lock_guard lk(outbox_mu_);
        batch.swap(outbox_);
    }
    for (Outgoing &o : batch) send_request(o, /*cancel=*/false);
}

void UcxWorker::send_request(Outgoing &o, bool cancel) {
    Request *rq = o.request;
    uint64_t id = rq->header.id;
    std::unique_lock plk(o.peer->mu_);
    ucp_ep_h ep = o.peer->lane(o.lane);
    if (cancel || o.peer->failed() || ep == nullptr) {
        plk.unlock();
        delete rq;
        if (PendingRead *p = take_pending(id)) finish(p, cancel ? UCS_ERR_CANCELED : UCS_ERR_CONNECTION_RESET);
        return;
    }
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    // REPLY: the holder answers on the endpoint the request came on.
    prm.flags = UCP_AM_SEND_FLAG_EAGER | UCP_AM_SEND_FLAG_REPLY;
    prm.user_data = rq;
    prm.cb.send = [](void *request, ucs_status_t st, void *user_data) {
        ucp_request_free(request);
        auto *r = static_cast<Request *>(user_data);
        // Not sent: nobody will answer it.
        PendingRead *p = st != UCS_OK ? r->owner->take_pending(r->header.id) : nullptr;
        delete r;
        if (p != nullptr) finish(p, st);
    };
    ucs_status_ptr_t req =
        ucp_am_send_nbx(ep, kReadRequest, &rq->header, sizeof rq->header, rq->rkey.data(), rq->rkey.size(), &prm);
    plk.unlock();
    if (UCS_PTR_IS_PTR(req)) return;  // sent (or failed) later: prm.cb.send
    ucs_status_t st = UCS_PTR_STATUS(req);
    delete rq;
    if (st == UCS_OK) return;
    if (PendingRead *p = take_pending(id)) finish(p, st);
}

ucs_status_t UcxWorker::on_read_reply(void *arg, const void *header, size_t header_length, void *data, size_t length,
                                      const ucp_am_recv_param_t *param) {
    auto *self = static_cast<UcxWorker *>(arg);
    ReadReplyHeader h{};
    if (header_length != sizeof h) return UCS_OK;  // not an answer of ours
    std::memcpy(&h, header, sizeof h);
    PendingRead *g = self->take_pending(h.id);
    ucs_status_t st = static_cast<ucs_status_t>(h.status);
    // Answers are sent eagerly; a rendezvous would need a receive posted.
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {
        ucp_am_data_release(self->worker_.load(), data);
        st = UCS_ERR_UNSUPPORTED;
    }
    if (g == nullptr) return UCS_OK;  // answered after it was given up
    if (st == UCS_OK && length != g->length) st = UCS_ERR_MESSAGE_TRUNCATED;
    if (st == UCS_OK && length > 0) {
        try {
            copy_from_host(g->local, data, length, g->kind);
        } catch (const std::exception &e) {
            TH_LOG(Error, "cannot place ", length, " bytes read: ", e.what());
            st = UCS_ERR_IO_ERROR;
        }
    }
    finish(g, st);
    return UCS_OK;
}

// ---- Reading: the holder's side -------------------------------------------

ucs_status_t UcxWorker::on_read_request(void *arg, const void *header, size_t header_length, void *data, size_t length,
                                        const ucp_am_recv_param_t *param) {
    auto *self = static_cast<UcxWorker *>(arg);
    ReadRequestHeader h{};
    bool rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    if (header_length != sizeof h || rndv || length > kMaxRkey ||
        (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) == 0) {
        // Not a request of ours, or nobody to answer.
        if (rndv) ucp_am_data_release(self->worker_.load(), data);
        TH_LOG(Warn, "dropped a malformed read request (", header_length, "-byte header, ", length, "-byte payload)");
        return UCS_OK;
    }
    std::memcpy(&h, header, sizeof h);
    auto *a = new Answer{{h.id, UCS_OK, 0}, nullptr};
    if (h.length == 0) {
        // A ping: answered with no bytes.
    } else if (h.length > kMaxRead) {
        a->header.status = UCS_ERR_INVALID_PARAM;
    } else {
        a->region = self->served_region(h.remote, h.length, static_cast<const uint8_t *>(data), length);
        if (!a->region) a->header.status = UCS_ERR_INVALID_ADDR;
    }
    if (a->header.status != UCS_OK)
        TH_LOG(Warn, "refused to serve a read of ", h.length, " bytes at 0x", std::hex, h.remote, std::dec, ": ",
               a->header.status == UCS_ERR_INVALID_ADDR ? "no region of this process with that key holds it"
                                                       : "longer than any read");
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    prm.flags = UCP_AM_SEND_FLAG_EAGER;
    prm.user_data = a;
    // A failed answer (the reader gave up, went away, or this process was
    // paused and the reader closed its endpoint) is the reader's to handle,
    // through its endpoint error or its deadline. Nothing is left to do here.
    prm.cb.send = [](void *request, ucs_status_t, void *user_data) {
        ucp_request_free(request);
        delete static_cast<Answer *>(user_data);
    };
    const void *bytes = nullptr;
    size_t n = 0;
    if (a->region) {
        bytes = reinterpret_cast<const void *>(h.remote);
        n = h.length;
        prm.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH | UCP_OP_ATTR_FIELD_MEMORY_TYPE;
        prm.memh = a->region->memh;
        prm.memory_type = a->region->kind == TH_MEM_CUDA ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
    }
    // Answered here, inside the handler: the reply endpoint is only known to
    // be valid until the handler returns.
    ucs_status_ptr_t req = ucp_am_send_nbx(param->reply_ep, kReadReply, &a->header, sizeof a->header, bytes, n, &prm);
    if (!UCS_PTR_IS_PTR(req)) delete a;
    return UCS_OK;
}

}  // namespace th
