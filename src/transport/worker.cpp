#include "transport/worker.hpp"

#include <poll.h>
#include <sys/prctl.h>

#include <algorithm>
#include <tuple>
#include <utility>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/thread_name.hpp"
#include "transport/ucx_env.hpp"
#include "transport/ucx_log.hpp"
#include "transport/reads.hpp"

namespace th {

namespace {

void check(ucs_status_t st, const char *what) {
    if (st != UCS_OK) fail(TH_ERR_TRANSPORT, what, ": ", ucs_status_string(st));
}

bool any_in_progress(const std::vector<void *> &requests) {
    return std::any_of(requests.begin(), requests.end(),
                       [](void *r) { return ucp_request_check_status(r) == UCS_INPROGRESS; });
}

}  // namespace

ucp_context_h UcxWorker::create_context(const UcxOptions &options) {
    route_ucx_log();
    ucp_config_t *config = nullptr;
    check(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
    const char *refused = nullptr;
    if (!apply_ucx_defaults(config, &refused)) {
        ucp_config_release(config);
        fail(TH_ERR_TRANSPORT, "UCX refused the setting ", refused, " (set UCX_", refused, " to override it)");
    }
    // Two threads share the worker (the progress thread and the caller's).
    // The read handler answers from inside ucp_worker_progress, so it takes
    // the worker's lock a second time: that needs UCX's (recursive) spinlock;
    // UCX's mutex is not recursive and would deadlock.
    if (ucp_config_modify(config, "USE_MT_MUTEX", "n") != UCS_OK ||
        (!options.transports.empty() && ucp_config_modify(config, "TLS", options.transports.c_str()) != UCS_OK)) {
        ucp_config_release(config);
        fail(TH_ERR_TRANSPORT, "UCX refused tensorhub's settings (recursive worker lock, transports '",
             options.transports, "')");
    }
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    params.features = UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
    params.mt_workers_shared = 1;
    ucp_context_h context = nullptr;
    ucs_status_t st = ucp_init(&params, config, &context);
    ucp_config_release(config);
    check(st, "ucp_init");
    return context;
}

UcxWorker::UcxWorker(PauseRecovery pause, UcxOptions options)
    : pause_(std::move(pause)), options_(std::move(options)), context_(create_context(options_)),
      one_sided_(ucx_one_sided_reads()), registry_(context_) {
    options_.copy_threads = std::max<uint32_t>(options_.copy_threads, 1);
    try {
        auto [w, addr] = create_worker(/*main=*/true);
        main_.worker = w;
        address_ = std::move(addr);
    } catch (...) {
        ucp_cleanup(context_);
        throw;
    }
    TH_LOG(Debug, "UCX ", describe_ucx());
    last_turn_ = std::chrono::steady_clock::now().time_since_epoch().count();
    main_.thread = std::thread([this] { progress_loop(main_); });
}

bool UcxWorker::make_copiers() {
    if (copiers_tried_) return copiers_up_.load();
    copiers_tried_ = true;
    if (options_.copy_threads <= 1) return false;
    std::vector<std::unique_ptr<Engine>> made;
    try {
        for (uint32_t i = 1; i < options_.copy_threads; ++i) {
            auto e = std::make_unique<Engine>();
            e->worker = create_worker(/*main=*/false).first;
            made.push_back(std::move(e));
        }
    } catch (const std::exception &ex) {
        TH_LOG(Warn, "cannot make a copy worker (", ex.what(), "): one thread posts every read");
        for (auto &e : made) ucp_worker_destroy(e->worker.load());
        return false;
    }
    copiers_ = std::move(made);
    for (auto &e : copiers_) e->thread = std::thread([this, eng = e.get()] { progress_loop(*eng); });
    copiers_up_ = true;
    TH_LOG(Debug, "one-sided reads into host memory are posted by ", options_.copy_threads, " threads");
    return true;
}

std::string UcxWorker::describe_ucx() {
    unsigned major = 0, minor = 0, release = 0;
    ucp_get_version(&major, &minor, &release);
    return str(major, ".", minor, ".", release, ucx_one_sided_reads() ? " (one-sided reads where the transport allows)"
                                                                      : " (active-message reads)");
}

// The main worker answers read requests; a copy worker only posts reads
// and has no address anybody connects to.
std::pair<ucp_worker_h, std::vector<uint8_t>> UcxWorker::create_worker(bool main) {
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_MULTI;
    ucp_worker_h w = nullptr;
    check(ucp_worker_create(context_, &wp, &w), "ucp_worker_create");
    if (!main) return {w, {}};
    ucp_address_t *addr = nullptr;
    size_t len = 0;
    ucs_status_t st = ucp_worker_get_address(w, &addr, &len);
    if (st != UCS_OK) {
        ucp_worker_destroy(w);
        check(st, "ucp_worker_get_address");
    }
    std::vector<uint8_t> packed(reinterpret_cast<uint8_t *>(addr), reinterpret_cast<uint8_t *>(addr) + len);
    ucp_worker_release_address(w, addr);
    for (auto [id, cb] : {std::pair{kReadRequest, &UcxWorker::on_read_request}, std::pair{kReadReply, &UcxWorker::on_read_reply},
                          std::pair{kWaitingRead, &UcxWorker::on_waiting_read}}) {
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
        // Forced closes complete locally; should one not, the worker's
        // destruction below takes the endpoint with it after this bound.
        auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
        std::lock_guard lk(mu_);
        if (ucx_aborts_on_a_failed_wireup_reply()) flush_endpoints(std::chrono::steady_clock::now() + std::chrono::milliseconds(500));
        for (auto &[id, p] : peers_) {
            std::lock_guard plk(p->mu_);
            for (void *req : p->drop_endpoints(/*close=*/true)) {
                // A copy worker's close requests are progressed by its
                // thread, which may be asleep on its event fd.
                for (auto &e : copiers_) ucp_worker_signal(e->worker);
                while (ucp_request_check_status(req) == UCS_INPROGRESS && std::chrono::steady_clock::now() < until)
                    ucp_worker_progress(main_.worker);
                if (ucp_request_check_status(req) == UCS_INPROGRESS)
                    TH_LOG(Warn, "closing the endpoint to worker ", id, " did not complete in time");
                ucp_request_free(req);
            }
        }
        peers_.clear();
    }
    stop_ = true;
    std::vector<Engine *> engines{&main_};
    for (auto &e : copiers_) engines.push_back(e.get());
    for (Engine *e : engines) {
        ucp_worker_signal(e->worker);
        if (e->thread.joinable()) e->thread.join();
    }
    for (Engine *e : engines) {
        for (Outgoing &o : e->outbox) send(o, /*cancel=*/true);
        e->outbox.clear();
    }
    for (auto &e : copiers_) ucp_worker_destroy(e->worker);
    ucp_worker_destroy(main_.worker);
    registry_.clear();  // after the last answer completed: answers count on their region
    // A read still waiting for its answer (a greeting to a peer that never
    // answered, say) gets its error now, rather than never, and is freed.
    fail_reads([](const PendingRead &) { return true; }, UCS_ERR_CANCELED);
    // A set-aside worker is never touched again: destroying it would progress
    // the very requests whose answer aborts. Its context stays with it.
    if (set_aside_.empty()) ucp_cleanup(context_);
}

// Where UCX aborts on a failed connection whose wireup reply is still queued
// (ucx_env.hpp), a worker that goes leaves politely so as not to do that to
// others: it flushes every endpoint it has, the ones UCX made for peers that
// connected to it included (a worker flush), which completes once they are
// connected, and goes on progressing for at least kSettle, so that the
// wireup messages of the last connections made with it are answered. An
// idle worker flushes at once. (Before the event receive lost its timeout,
// a client's destruction waited up to 100 ms for it with this worker still
// progressing, and that hid the assertion.)
void UcxWorker::flush_endpoints(std::chrono::steady_clock::time_point until) {
    constexpr auto kSettle = std::chrono::milliseconds(100);
    auto settled = std::chrono::steady_clock::now() + kSettle;
    std::vector<void *> flushing;
    std::vector<ucp_worker_h> workers{main_.worker.load()};
    for (auto &e : copiers_) workers.push_back(e->worker);
    for (ucp_worker_h w : workers) {
        ucp_request_param_t prm{};
        void *req = ucp_worker_flush_nbx(w, &prm);
        if (UCS_PTR_IS_PTR(req)) flushing.push_back(req);
    }
    for (auto &e : copiers_) ucp_worker_signal(e->worker);
    for (auto now = std::chrono::steady_clock::now(); now < until && (any_in_progress(flushing) || now < settled);
         now = std::chrono::steady_clock::now())
        ucp_worker_progress(main_.worker);
    // One still in progress completes, or fails, with the forced close.
    for (void *req : flushing) ucp_request_free(req);
}

void UcxWorker::progress_loop(Engine &e) {
    const bool main = &e == &main_;
    // Named for top -H and debuggers. Its timer slack is set, not inherited
    // from whoever made the client (a service manager may set milliseconds
    // for a whole process: systemd's TimerSlackNSec): a nap (below) lasts
    // kNap plus it.
    name_this_thread(main ? "th-progress" : "th-copy");
    prctl(PR_SET_TIMERSLACK, kProgressTimerSlackNs);
    int efd = -1;
    auto get_efd = [&] {
        if (ucp_worker_get_efd(e.worker, &efd) != UCS_OK) {
            TH_LOG(Error, "ucp_worker_get_efd failed; progress thread polls");
            efd = -1;
        }
    };
    get_efd();
    // After the last completion keep polling a little before sleeping: a
    // one-sided read over cma is copied while it is posted, and the next read
    // usually follows within microseconds (below), where sleeping on the
    // event fd and waking cost ~0.1 ms a read. Only while events come that
    // fast, though: on a slower link (segments 500 us apart at 1 gbit) the
    // polling would burn a tenth of a core per process for nothing, which
    // many processes sharing few cores cannot afford.
    constexpr auto kSpin = std::chrono::microseconds(100);
    // Nor while every read of this engine waits for a holder's answers:
    // those come when the holder sends them, and the socket keeps them
    // meanwhile. Polling for them took the CPU the holder needed to send them
    // (one host over tcp), and sleeping on the event fd made the holder wake
    // this thread for every segment. So the thread naps instead, without
    // waking anybody, and takes what arrived meanwhile; once a nap brought
    // nothing it sleeps on the event fd, which the next answer wakes.
    // Measured over tcp on one 2-vCPU host with bbr congestion control,
    // 1 GiB: polling 2.0 GB/s, sleeping on the fd 2.3-2.6, napping 2.8-2.9;
    // with cubic polling and napping read alike (4.0-4.6), napping with a
    // quarter less CPU (perf/FETCH.md). A nap of
    // kNap lasts ~0.1 ms with the thread's timer slack (the kernel's default,
    // kProgressTimerSlackNs).
    constexpr auto kNap = std::chrono::microseconds(30);
    auto only_pulls = [&e] {
        uint32_t pulls = e.pulls.load(std::memory_order_relaxed);
        return pulls > 0 && pulls >= e.outstanding.load(std::memory_order_relaxed);
    };
    auto last_busy = std::chrono::steady_clock::now();
    bool spin = true;
    bool napped = false;  // napped since the last progress: an empty turn now sleeps on the fd
    // Every turn of the loop is short (a progress call, or a poll of at most
    // 100 ms), so a long gap between two turns means the process was paused.
    // The main engine's thread notices it and acts for all.
    const auto pause_limit = std::chrono::milliseconds(main ? pause_.pause_ms : 0);
    auto turn = std::chrono::steady_clock::now();
    while (!stop_.load(std::memory_order_relaxed)) {
        auto now = std::chrono::steady_clock::now();
        if (pause_limit.count() > 0 && now - turn > pause_limit) {
            restart_after_pause(std::chrono::duration_cast<std::chrono::milliseconds>(now - turn).count());
            get_efd();
            now = last_busy = std::chrono::steady_clock::now();
        }
        turn = now;
        if (main) last_turn_.store(now.time_since_epoch().count(), std::memory_order_relaxed);
        // A one-sided read over cma is copied while it is posted and has
        // completed when the post returns: that is work too, and the next
        // read usually follows within microseconds (measured with one read
        // in flight: 8 us from a completion to the next read's post, where
        // sleeping on the event fd and waking cost ~0.1 ms a read).
        if (send_outbox(e) > 0) last_busy = std::chrono::steady_clock::now();
        if (main) look_at_parked(now);
        ucp_worker_h w = e.worker.load(std::memory_order_relaxed);
        if (ucp_worker_progress(w) != 0) {
            while (ucp_worker_progress(w) != 0) {
            }
            last_busy = std::chrono::steady_clock::now();
            napped = false;
            continue;
        }
        if (only_pulls()) {
            if (!std::exchange(napped, true)) {
                std::this_thread::sleep_for(kNap);
                continue;
            }
        } else if (spin && std::chrono::steady_clock::now() - last_busy < kSpin) {
            continue;
        }
        if (efd < 0) {
            std::this_thread::sleep_for(std::chrono::microseconds(50));
            continue;
        }
        {
            std::lock_guard lk(e.outbox_mu);
            if (!e.outbox.empty()) continue;
        }
        ucs_status_t st = ucp_worker_arm(w);
        if (st == UCS_ERR_BUSY) continue;
        pollfd pfd{efd, POLLIN, 0};
        auto slept_from = std::chrono::steady_clock::now();
        // The timeout only bounds how late a missed wake-up can be noticed.
        poll(&pfd, 1, 100);
        last_busy = std::chrono::steady_clock::now();
        spin = last_busy - slept_from < kSpin;
    }
    if (!main) return;
    // The endpoints this thread made to answer waiting reads are closed by
    // it, like the others (~UcxWorker), within a bound.
    drop_answer_peers(/*close=*/true);
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
    ucp_worker_h w = e.worker.load();
    while (any_in_progress(answer_closes_) && std::chrono::steady_clock::now() < until) ucp_worker_progress(w);
    for (void *req : answer_closes_) ucp_request_free(req);
    answer_closes_.clear();
}

void UcxWorker::restart_after_pause(uint64_t paused_ms) {
    ucp_worker_h fresh = nullptr;
    std::vector<uint8_t> address;
    try {
        std::tie(fresh, address) = create_worker(/*main=*/true);
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
        paused = main_.worker.exchange(fresh);
        address_ = std::move(address);
        set_aside_.push_back(paused);
        registry_.abandon_answers();  // those queued on the paused worker: none runs before the fresh one
        for (auto &[id, p] : peers_) dropped.push_back(p);
        peers_.clear();
    }
    for (const PeerRef &p : dropped) {
        int expected = UCS_OK;
        p->status_.compare_exchange_strong(expected, kDroppedByPause);
    }
    // Their reads, on any engine, fail as dropped by the pause before the
    // copy workers' endpoints are closed (which would fail them otherwise).
    size_t orphans = fail_reads(
        [&](const PendingRead &g) {
            return g.worker == paused || std::any_of(dropped.begin(), dropped.end(),
                                                     [&](const PeerRef &p) { return p.get() == g.peer; });
        },
        kDroppedByPause);
    for (const PeerRef &p : dropped) {
        std::lock_guard plk(p->mu_);
        // The main worker's endpoints belong to the set-aside worker.
        for (void *req : p->drop_endpoints(/*close=*/false)) ucp_request_free(req);
    }
    // So do the endpoints to readers, whose waiting reads were given up.
    drop_answer_peers(/*close=*/false);
    restarts_++;
    TH_LOG(Warn, "this process was paused for ", paused_ms, " ms: its peers have given up on it, so its ", dropped.size(),
           " UCX endpoint(s) and ", orphans, " read(s) in flight were dropped and a new UCX worker took over");
    if (pause_.on_restart) pause_.on_restart(paused_ms);
}

void UcxWorker::wake() { ucp_worker_signal(main_.worker); }

std::vector<uint8_t> UcxWorker::address() {
    settle_pause();
    std::lock_guard lk(mu_);
    return address_;
}

void UcxWorker::settle_pause() {
    using namespace std::chrono;
    if (pause_.pause_ms == 0 || std::this_thread::get_id() == main_.thread.get_id()) return;
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

}  // namespace th
