#include "transport/ucx.hpp"

#include <poll.h>

#include <algorithm>
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

struct UcxWorker::PendingGet {
    UcxWorker *owner;
    GetCallback cb;
};

MemRegion::~MemRegion() {
    if (memh != nullptr) ucp_mem_unmap(context, memh);
}

Peer::~Peer() {
    for (Endpoint &e : eps_)
        for (auto &[k, r] : e.rkeys) ucp_rkey_destroy(r);
}

ucp_rkey_h Peer::rkey(const std::vector<uint8_t> &packed, Lane l) {
    std::lock_guard lk(mu_);
    Endpoint &e = lane(l);
    if (e.ep == nullptr) fail(TH_ERR_TRANSPORT, "the endpoint to worker ", worker_id_, " is closed");
    auto it = e.rkeys.find(packed);
    if (it != e.rkeys.end()) return it->second;
    ucp_rkey_h r = nullptr;
    check(ucp_ep_rkey_unpack(e.ep, packed.data(), &r), "ucp_ep_rkey_unpack");
    e.rkeys.emplace(packed, r);
    return r;
}

std::vector<void *> Peer::drop_endpoints(bool close) {
    std::vector<void *> closing;
    for (Endpoint &e : eps_) {
        for (auto &[k, r] : e.rkeys) ucp_rkey_destroy(r);
        e.rkeys.clear();
        if (e.ep != nullptr && close) {
            ucp_request_param_t prm{};
            prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
            prm.flags = UCP_EP_CLOSE_FLAG_FORCE;
            void *req = ucp_ep_close_nbx(e.ep, &prm);
            if (UCS_PTR_IS_PTR(req)) closing.push_back(req);
        }
        e.ep = nullptr;
    }
    return closing;
}

void Peer::on_error(void *arg, ucp_ep_h, ucs_status_t status) {
    auto *p = static_cast<Peer *>(arg);
    int expected = UCS_OK;
    if (p->status_.compare_exchange_strong(expected, status))
        TH_LOG(Info, "peer ", p->worker_id_, " failed: ", ucs_status_string(status));
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
    // UCX guards it with a spinlock by default; when the machine has more
    // runnable threads than cores, a waiter spins through the holder's
    // preemption. A mutex sleeps instead (measured: a chain of 8 readers on
    // 2 cores, 1.85x -> 1.6x of the bandwidth floor), unless the user chose.
    if (std::getenv("UCX_USE_MT_MUTEX") == nullptr && ucp_config_modify(config, "USE_MT_MUTEX", "y") != UCS_OK)
        TH_LOG(Warn, "could not make UCX use a mutex for its worker lock");
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    params.features = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
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
    regions_.clear();
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
    std::vector<PendingGet *> orphans;
    {
        std::lock_guard lk(pending_mu_);
        for (auto it = pending_.begin(); it != pending_.end();) {
            if (it->second != paused) {
                ++it;
                continue;
            }
            orphans.push_back(it->first);
            it = pending_.erase(it);
        }
    }
    for (PendingGet *g : orphans) {
        g->cb(kDroppedByPause);
        delete g;
    }
    restarts_++;
    TH_LOG(Warn, "this process was paused for ", paused_ms, " ms: its peers have given up on it, so its ", dropped.size(),
           " UCX endpoint(s) and ", orphans.size(), " read(s) in flight were dropped and a new UCX worker took over");
    if (pause_.on_restart) pause_.on_restart(paused_ms);
}

void UcxWorker::wake() { ucp_worker_signal(worker_); }

std::vector<uint8_t> UcxWorker::address() const {
    std::lock_guard lk(mu_);
    return address_;
}

RegionRef UcxWorker::register_memory(void *ptr, uint64_t n, th_mem_kind kind) {
    if (ptr == nullptr || n == 0) fail(TH_ERR_INVALID_ARG, "cannot register a null or empty buffer");
    auto p = reinterpret_cast<uintptr_t>(ptr);
    std::lock_guard lk(mu_);
    for (auto &r : regions_)
        if (r->kind == kind && r->contains(p, n)) return r;
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
    // Drop idle registrations beyond the cap, oldest first.
    size_t idle = std::count_if(regions_.begin(), regions_.end(), [](auto &x) { return x.use_count() == 1; });
    for (auto it = regions_.begin(); idle >= kMaxIdleRegions && it != regions_.end();) {
        if (it->use_count() == 1) {
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
    std::lock_guard lk(mu_);
    std::erase_if(regions_, [&](const RegionRef &r) { return r->base == p && r.use_count() == 1; });
}

size_t UcxWorker::registrations() const {
    std::lock_guard lk(mu_);
    return regions_.size();
}

PeerRef UcxWorker::peer(uint64_t worker_id, const std::vector<uint8_t> &address) {
    std::lock_guard lk(mu_);
    auto it = peers_.find(worker_id);
    if (it != peers_.end() && !it->second->failed() && it->second->address_ == address) return it->second;
    auto p = std::make_shared<Peer>();
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
    for (Peer::Endpoint &e : p->eps_) {
        ucs_status_t st = ucp_ep_create(p->ep_worker_, &ep, &e.ep);
        if (st != UCS_OK) {
            for (void *req : p->drop_endpoints(/*close=*/true)) ucp_request_free(req);
            fail(TH_ERR_TRANSPORT, "cannot connect to worker ", worker_id, ": ", ucs_status_string(st));
        }
    }
    if (it != peers_.end()) {
        // The failed (or outdated) endpoints stay referenced by whoever
        // still uses them; close them.
        PeerRef old = it->second;
        it->second = p;
        std::lock_guard plk(old->mu_);
        for (void *req : old->drop_endpoints(/*close=*/true)) ucp_request_free(req);
    } else {
        peers_.emplace(worker_id, p);
    }
    return p;
}

void UcxWorker::close_peer(const PeerRef &peer, const std::string &why) {
    if (!peer) return;
    int expected = UCS_OK;
    if (peer->status_.compare_exchange_strong(expected, UCS_ERR_CANCELED))
        TH_LOG(Info, "closing endpoint to worker ", peer->worker_id_, ": ", why);
    std::lock_guard lk(mu_);
    std::lock_guard plk(peer->mu_);
    for (void *req : peer->drop_endpoints(/*close=*/true)) ucp_request_free(req);
    auto it = peers_.find(peer->worker_id_);
    if (it != peers_.end() && it->second == peer) peers_.erase(it);
    ucp_worker_signal(worker_);
}

// Whoever takes a GET out of pending_ completes it: its UCX callback, or a
// restart that sets its worker aside.
bool UcxWorker::take_pending(PendingGet *g) {
    std::lock_guard lk(pending_mu_);
    return pending_.erase(g) == 1;
}

void UcxWorker::on_get_done(void *request, ucs_status_t status, void *user_data) {
    auto *g = static_cast<PendingGet *>(user_data);
    ucp_request_free(request);
    if (g->owner->take_pending(g)) {
        g->cb(status);
        delete g;
    }
}

void UcxWorker::get(const PeerRef &peer, Lane lane, void *local, uint64_t n, const MemRegion *local_region,
                    uint64_t remote, ucp_rkey_h rkey, GetCallback cb) {
    std::unique_lock plk(peer->mu_);
    ucp_ep_h ep = peer->lane(lane).ep;
    if (peer->failed() || ep == nullptr) {
        plk.unlock();
        cb(UCS_ERR_CONNECTION_RESET);
        return;
    }
    auto *g = new PendingGet{this, std::move(cb)};
    {
        std::lock_guard lk(pending_mu_);
        pending_.emplace(g, peer->ep_worker_);
    }
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    prm.cb.send = &UcxWorker::on_get_done;
    prm.user_data = g;
    if (local_region != nullptr) {
        prm.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        prm.memh = local_region->memh;
    }
    ucs_status_ptr_t req = ucp_get_nbx(ep, local, n, remote, rkey, &prm);
    plk.unlock();
    if (UCS_PTR_IS_PTR(req)) return;  // completes through on_get_done
    if (take_pending(g)) {            // completed (or failed) at once
        g->cb(UCS_PTR_STATUS(req));
        delete g;
    }
}

}  // namespace th
