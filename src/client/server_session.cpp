#include "client/server_session.hpp"

#include <algorithm>
#include <thread>

#include "common/error.hpp"
#include "common/faults.hpp"
#include "common/log.hpp"
#include "common/thread_name.hpp"
#include "common/trace.hpp"
#include "control/ping.hpp"
#include "wire/auth.hpp"

namespace th {

using namespace wire;

namespace {

// An attempt whose timeout is noticed this much after it fell due was not
// timed by this process: it was stopped or starved meanwhile.
constexpr int64_t kLateTimerMs = 250;

// A call that has waited this long on the server in use has its server
// checked (etcd: does etcd name another leader; a list: is its connection
// gone), and again at this period while a call waits (watch_calls()).
constexpr auto kServerCheckAfter = std::chrono::milliseconds(500);
constexpr auto kServerCheckEvery = std::chrono::milliseconds(250);

// How soon a Hello answered "probing" (the server asks the one we left
// whether it still answers) is sent again.
constexpr int32_t kProbingRetryMs = 20;

// The server announces its event URL as it bound it ("tcp://0.0.0.0:port" when
// it listens on all interfaces): dial the host we reach the server at instead.
std::string reachable_events_url(const std::string &server_url, const std::string &events_url) {
    if (server_url.rfind("tcp", 0) != 0 || events_url.rfind("tcp", 0) != 0) return events_url;
    size_t s = server_url.rfind(':'), e = events_url.rfind(':');
    if (s == std::string::npos || e == std::string::npos) return events_url;
    return server_url.substr(0, s) + events_url.substr(e);
}

// A server asked to take over refused: the server this worker left still
// answers (ErrorReply.left_server_alive).
class LeftServerAlive : public Error {
  public:
    using Error::Error;
};

}  // namespace

ServerSession::ServerSession(const ClientConfig &cfg, uint64_t worker_id) : cfg_(cfg), worker_id_(worker_id) {
    if (FollowLeader::is_etcd_url(cfg_.server_url)) {
        leader_ = std::make_unique<FollowLeader>(cfg_.server_url, cfg_.timeout_ms);
        return;
    }
    for (size_t pos = 0; pos <= cfg_.server_url.size();) {
        size_t comma = std::min(cfg_.server_url.find(',', pos), cfg_.server_url.size());
        std::string url = cfg_.server_url.substr(pos, comma - pos);
        if (!url.empty()) servers_.push_back(url);
        pos = comma + 1;
    }
    if (servers_.empty()) fail(TH_ERR_INVALID_ARG, "server_url names no server");
}

ServerSession::~ServerSession() { stop_heartbeats(); }

void ServerSession::connect(UcxWorker &ucx, SessionListener &listener) {
    ucx_ = &ucx;
    listener_ = &listener;
    // With several servers, start with the one of the newest epoch: a server
    // that was paused or cut off and came back is behind the one that took
    // over. Otherwise the first that answers, each given its share of the time.
    // In etcd mode, the leader etcd names; one that does not answer (or no
    // longer leads) is asked again after a short wait for etcd to name another.
    Deadline deadline(cfg_.timeout_ms);
    size_t first = !leader_ && servers_.size() > 1 ? newest_server(deadline) : 0;
    for (size_t i = first;; ++i) {
        std::string url;
        Deadline attempt = deadline;
        if (leader_) {
            following_ = leader_->next(following_, false, deadline);
            url = following_.url;
        } else {
            current_ = i % servers_.size();
            url = servers_[current_];
            size_t left = servers_.size() - std::min(i - first, servers_.size() - 1);
            attempt = deadline.capped(std::max<uint32_t>(deadline.remaining_ms() / static_cast<uint32_t>(left), 1));
        }
        rpc_ = std::make_shared<RpcClient>(url, cfg_.token);
        try {
            hello(attempt);
            break;
        } catch (const Error &e) {
            if ((e.code() != TH_ERR_UNAVAILABLE && e.code() != TH_ERR_TIMEOUT) || deadline.expired()) throw;
            TH_LOG(Info, "server ", url, " did not answer: ", e.what());
        }
    }
    heartbeat_ = std::thread([this] {
        name_this_thread("th-heartbeat");
        heartbeat_loop();
    });
    if (can_fail_over()) {
        watcher_ = std::thread([this] {
            name_this_thread("th-failover");
            watch_calls();
        });
    }
}

void ServerSession::stop_heartbeats() {
    {
        std::lock_guard lk(hb_mu_);
        stop_ = true;
    }
    hb_cv_.notify_all();
    // A heartbeat waiting on a server this client has no connection to (it
    // is gone: its port refuses) would hold the close for a whole call's
    // timeout, and the goodbye and releases after it as long each: they end
    // at once instead (TH_ERR_CLOSED), and the server forgets this worker
    // with its lease.
    if (std::shared_ptr<RpcClient> at = rpc(); at && !at->connected()) {
        TH_LOG(Info, "closing without a connection to the server at ", at->url(), ": not saying goodbye");
        at->abandon();
    }
    if (heartbeat_.joinable()) heartbeat_.join();
    {
        std::lock_guard lk(watch_mu_);
        watch_stop_ = true;
    }
    watch_cv_.notify_all();
    if (watcher_.joinable()) watcher_.join();
}

void ServerSession::goodbye() {
    // Closing without a connection (stop() said so): no goodbye to fail.
    if (std::shared_ptr<RpcClient> at = rpc(); at && at->abandoned()) return;
    try {
        call([](Builder &b, const Header &h) { return wire::finish(b, h, CreateGoodbye(b)); },
             Deadline(std::min<uint32_t>(cfg_.timeout_ms, 1000)));
    } catch (const std::exception &e) {
        TH_LOG(Info, "goodbye to the server failed: ", e.what());
    }
}

void ServerSession::disconnect() {
    events_.reset();
    rpc_.reset();
}

size_t ServerSession::newest_server(const Deadline &deadline) {
    size_t best = 0;
    uint64_t best_epoch = 0;
    for (size_t i = 0; i < servers_.size(); ++i) {
        try {
            // A fixed share of the whole budget, so that a silent server
            // cannot leave none for the Hello that follows.
            uint32_t share = std::max<uint32_t>(cfg_.timeout_ms / static_cast<uint32_t>(servers_.size() + 1), 1);
            uint64_t epoch = ping_server(servers_[i], cfg_.token, deadline.capped(share));
            TH_LOG(Debug, "server ", servers_[i], " answers with epoch ", epoch);
            if (epoch > best_epoch) {
                best = i;
                best_epoch = epoch;
            }
        } catch (const Error &e) {
            TH_LOG(Info, "server ", servers_[i], " did not answer: ", e.what());
        }
    }
    TH_LOG(Info, "starting with server ", servers_[best], " (epoch ", best_epoch, ")");
    return best;
}

Header ServerSession::header() {
    Header h;
    h.request_id = next_request_++;
    h.worker_id = worker_id_;
    h.epoch = max_epoch_.load();
    return h;
}

std::shared_ptr<RpcClient> ServerSession::rpc() {
    std::lock_guard lk(rpc_mu_);
    return rpc_;
}

// Registers with everything we hold wherever we moved to: with a new server
// (or a new term of the same one) the server must learn it all again. In list
// mode the Hellos name the server we left: if it still answers, the next one
// refuses to take over and we go back (reregister()).
void ServerSession::fail_over(const std::shared_ptr<RpcClient> &from, const std::string &why, bool deposed,
                              const Deadline &deadline) {
    // etcd is asked without the lock: a call with a shorter deadline must not
    // wait behind this one's patience.
    LeaderRecord next;
    if (leader_) {
        LeaderRecord seen;
        {
            std::lock_guard lk(rpc_mu_);
            if (rpc_ != from) return;
            seen = following_;
        }
        next = leader_->next(seen, deposed, deadline);
    }
    {
        std::lock_guard lk(rpc_mu_);
        if (rpc_ != from) return;
        std::string to;
        if (leader_) {
            following_ = next;
            to = following_.url;
        } else {
            left_ = {from->url(), current_, rebuilt_by_.load()};
            current_ = (current_ + 1) % servers_.size();
            to = servers_[current_];
            // Going round the whole list: give the servers a moment.
            if (current_ == 0)
                std::this_thread::sleep_for(std::chrono::milliseconds(std::min(100, deadline.remaining_ms())));
        }
        TH_LOG(Warn, "server ", from->url(), ": ", why, "; failing over to ", to);
        rpc_ = std::make_shared<RpcClient>(to, cfg_.token);
        failed_over_to_ = leader_ ? nullptr : rpc_;
        // Calls still waiting on the old server end at once and ask here.
        from->abandon();
        rebuilt_by_ = Clock::now() + std::chrono::milliseconds(lease_ms_.load() + cfg_.timeout_ms);
    }
    reregister(deadline);
}

void ServerSession::go_back(const std::shared_ptr<RpcClient> &from, const std::string &why) {
    std::lock_guard lk(rpc_mu_);
    if (rpc_ != from || from != failed_over_to_) return;  // another thread moved on meanwhile
    TH_LOG(Warn, "server ", from->url(), ": ", why, "; going back to ", left_.url);
    current_ = left_.index;
    rpc_ = std::make_shared<RpcClient>(left_.url, cfg_.token);
    failed_over_to_ = nullptr;
    from->abandon();
    rebuilt_by_ = left_.rebuilt_by;
    confirmed_ = {rpc_, Clock::now() + std::chrono::milliseconds(cfg_.timeout_ms)};
}

bool ServerSession::confirmed_alive(const std::shared_ptr<RpcClient> &rpc) {
    std::lock_guard lk(rpc_mu_);
    return rpc == confirmed_.rpc && rpc == rpc_ && Clock::now() < confirmed_.until;
}

void ServerSession::try_fail_over(const std::shared_ptr<RpcClient> &from, const std::string &why, bool deposed,
                                  const Deadline &deadline) {
    try {
        fail_over(from, why, deposed, deadline);
    } catch (const Error &) {
        if (deadline.expired()) throw;
    }
}

Bytes ServerSession::call(const Build &build, const Deadline &deadline, bool recover_asked, Attempts attempts) {
    bool asked_again = false;
    bool asked_after_declarations = false;
    for (int reregistered = 0;;) {
        // A leaving worker (and a heartbeat in flight as it leaves) gives up
        // where it would fail over or register again.
        bool recover = recover_asked && !stop_.load();
        // Registering again where another thread has moved us on meanwhile
        // ends at once (RpcClient::abandon): this call then asks the server
        // in use now.
        auto moving_on = [&](auto step) {
            try {
                step();
            } catch (const Error &e) {
                if (e.code() != TH_ERR_CLOSED || !recover || deadline.expired()) throw;
            }
        };
        std::shared_ptr<RpcClient> rpc = this->rpc();
        uint64_t registered_before = registrations_.load();
        uint64_t declarations_before = declarations_seen();
        Bytes reply;
        int32_t attempt_ms = 0;
        Clock::time_point started = Clock::now();
        try {
            Builder b(512);
            // With servers to fail over to, one server may use only half of
            // the time left, and never more than half a control call's
            // timeout (a fetch's plans have the whole fetch's deadline): a
            // call waiting on a server that died ends by then and goes on.
            // Not on a server the next one just said still answers: it is
            // slow, and asking it again and again would only pile up work.
            int32_t half = std::min(deadline.remaining_ms() / 2, static_cast<int32_t>(cfg_.timeout_ms / 2));
            Deadline attempt = attempts == Attempts::Split && recover_asked && can_fail_over() && !confirmed_alive(rpc)
                                   ? deadline.capped(std::max(half, 1))
                                   : deadline;
            attempt_ms = attempt.remaining_ms();
            Bytes request = build(b, header());
            const Envelope *sent = trace::on() ? GetEnvelope(request.data()) : nullptr;
            if (sent) trace::event("call", sent->request_id(), static_cast<uint64_t>(sent->body_type()));
            reply = exchange(rpc, request, attempt);
            if (sent) trace::event("call_done", sent->request_id());
        } catch (const Error &e) {
            // Another thread failed over while this call waited: try again there.
            if (rpc->abandoned() && recover && !deadline.expired()) continue;
            // Not answering: the next server of the list, while time is left.
            // A server that does not answer in time (dead, paused, cut off)
            // is left for the next; should it come back, epochs fence it.
            bool next = e.code() == TH_ERR_UNAVAILABLE || e.code() == TH_ERR_TIMEOUT;
            if (!recover || !next || !can_fail_over() || deadline.expired()) throw;
            // The attempt's timer fired well after the attempt's end: this
            // process was stopped (SIGSTOP, a debugger) or starved meanwhile,
            // and the server's answer may be waiting in the socket. No sign
            // of a dead server: failing over would make the next one take
            // over while this one still serves the other workers, splitting
            // them between two. Ask the same server again, once.
            auto late = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count() - attempt_ms;
            if (!asked_again && late > kLateTimerMs) {
                asked_again = true;
                TH_LOG(Warn, "server ", rpc->url(), ": ", e.what(), ", but this process was not running for ", late,
                       " ms of that; asking it again");
                continue;
            }
            // The next server told us moments ago that this one still
            // answers: connected but late, it is slow, not gone, and moving
            // on again would only come back here. The call had all its time
            // (above).
            if (e.code() == TH_ERR_TIMEOUT && confirmed_alive(rpc)) throw;
            try_fail_over(rpc, e.what(), false, deadline);
            continue;
        }
        const Envelope *env = verify(reply.data(), reply.size());
        bool stale = env->epoch() < max_epoch_.load() ||
                     (env->body_type() == Body::ErrorReply && env->body_as_ErrorReply()->stale_server());
        if (stale) {
            std::string why = str("stale (epoch ", env->epoch(), ", newest seen ", max_epoch_.load(), ")");
            if (!recover || (!can_fail_over() && reregistered++ >= 2))
                fail(TH_ERR_UNAVAILABLE, "the server at ", rpc->url(), " is ", why);
            // With one server (restarted with a clock behind), saying Hello
            // again makes it take over above the epoch we saw. So it does
            // with a server we just failed over to, a standby restarted
            // after a server kill say: another thread's call may have
            // reached it before our Hello and been answered with the epoch
            // it had then. Leaving it would take us back to the server that
            // did not answer; the workers would follow us round.
            bool moved_here = [&] {
                std::lock_guard lk(rpc_mu_);
                return rpc == rpc_ && rpc == failed_over_to_;
            }();
            moving_on([&] {
                if (can_fail_over() && !(moved_here && reregistered++ < 2))
                    fail_over(rpc, why, true, deadline);
                else
                    reregister(deadline);
            });
            continue;
        }
        if (env->body_type() != Body::ErrorReply) return reply;
        const ErrorReply *e = env->body_as_ErrorReply();
        // etcd mode: this server stopped leading. Follow the next leader.
        if (e->not_leader() && recover && can_fail_over() && !deadline.expired()) {
            try_fail_over(rpc, "not the leader any more", true, deadline);
            continue;
        }
        // The server took over moments ago: holders are still re-declaring
        // what they hold. Ask again while the caller's time lasts.
        if (e->rebuilding() && recover && deadline.remaining_ms() > 100) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            continue;
        }
        // Another thread moved to another server meanwhile: ask there.
        if (e->unknown_worker() && recover && rpc != this->rpc()) continue;
        if (e->unknown_worker() && recover && reregistered++ < 2) {
            moving_on([&] { reregister(deadline, registered_before); });
            continue;
        }
        if (e->unknown_worker())
            fail(TH_ERR_UNAVAILABLE, "the server does not accept this worker: ", e->message() ? e->message()->str() : "");
        bool missing = e->code() == TH_ERR_NOT_FOUND || e->code() == TH_ERR_NOT_COMMITTED;
        if (missing && recover && !asked_after_declarations && after_declarations(declarations_before, deadline)) {
            asked_after_declarations = true;
            continue;
        }
        throw_reply_error(*e, "request");
    }
}

std::vector<UcxWorker::PeerAddress> ServerSession::take_connect_ahead() {
    std::lock_guard lk(hello_mu_);
    return std::exchange(connect_ahead_, {});
}

void ServerSession::hello(const Deadline &deadline) {
    std::vector<uint8_t> address = ucx_->address();
    std::shared_ptr<RpcClient> rpc;
    std::string left;  // list mode: the server we failed over from
    {
        std::lock_guard lk(rpc_mu_);
        rpc = rpc_;
        if (rpc == failed_over_to_) left = left_.url;
    }
    // The server we moved to may spend a quarter of a call's timeout asking
    // the one we left whether it still answers, before it takes over. Not
    // less when this call has less time left: a ping cut short would make it
    // take over from a live server, while a Hello that outlasts our deadline
    // only fails this call.
    uint32_t probe_ms = std::max<uint32_t>(cfg_.timeout_ms / 4, 1);
    Bytes reply;
    const Envelope *env = nullptr;
    for (;;) {
        Builder b(512);
        Header h = header();
        auto body = CreateHello(b, worker_id_, b.CreateString(cfg_.worker_name), put_labels(b, cfg_.labels),
                                b.CreateVector(address), left.empty() ? 0 : b.CreateString(left),
                                left.empty() ? 0 : probe_ms);
        reply = exchange(rpc, finish(b, h, body), deadline);
        env = verify(reply.data(), reply.size());
        if (env->body_type() != Body::ErrorReply) break;
        const ErrorReply *e = env->body_as_ErrorReply();
        std::string message = e->message() ? e->message()->str() : "";
        if (e->probing()) {
            // It is asking the server we left whether that one still answers.
            if (deadline.remaining_ms() <= kProbingRetryMs)
                fail(TH_ERR_TIMEOUT, "server ", rpc->url(), " was still asking ", left,
                     " whether it answers when the call's time ran out");
            std::this_thread::sleep_for(std::chrono::milliseconds(kProbingRetryMs));
            continue;
        }
        if (e->left_server_alive())
            throw LeftServerAlive(TH_ERR_UNAVAILABLE, message.empty() ? "the server left still answers" : message);
        throw_reply_error(*e, "Hello");
    }
    if (env->body_type() != Body::HelloReply) fail(TH_ERR_PROTOCOL, "unexpected reply to Hello");
    const HelloReply *r = env->body_as_HelloReply();
    uint64_t seen = max_epoch_.load();
    while (seen < r->server_epoch() && !max_epoch_.compare_exchange_weak(seen, r->server_epoch())) {
    }
    {
        std::lock_guard lk(hello_mu_);
        hello_address_ = std::move(address);
        hello_rpc_ = rpc;
        if (registrations_ == 0 && r->connect_ahead() != nullptr)
            for (const PeerAddress *p : *r->connect_ahead())
                if (p->worker_id() != 0 && p->worker_id() != worker_id_ && p->ucx_address() != nullptr &&
                    p->ucx_address()->size() > 0)
                    connect_ahead_.emplace_back(p->worker_id(), std::vector<uint8_t>(p->ucx_address()->begin(),
                                                                                     p->ucx_address()->end()));
        registrations_++;
    }
    if (r->lease_ms() > 0) lease_ms_ = r->lease_ms();
    std::string events = r->events_url() ? r->events_url()->str() : "";
    if (events.empty() && !told_no_events_) {
        told_no_events_ = true;
        TH_LOG(Warn, "the server at ", rpc->url(), " publishes no events (it listens on neither tcp:// nor ipc://); ",
               "going on without server events: waiting for a version asks once a second");
    }
    if (!events.empty()) {
        events = reachable_events_url(rpc->url(), events);
        if (!events_ || events_->url() != events) {
            events_.reset();
            try {
                events_ = std::make_unique<Subscriber>(events, [this](const uint8_t *d, size_t n) { on_event(d, n); });
            } catch (const Error &e) {
                // Events are hints: waiting for a version still asks at least once a second.
                TH_LOG(Warn, e.what(), "; going on without server events");
            }
        }
    }
}

void ServerSession::on_event(const uint8_t *data, size_t size) {
    if (faults().drop_events) return;
    try {
        const Envelope *env = verify(data, wire::open(data, size, cfg_.token));
        if (env->body_type() != Body::Event) return;
        const wire::Event *e = env->body_as_Event();
        std::lock_guard lk(ev_mu_);
        if (event_seq_ != 0 && e->seq() != event_seq_ + 1) event_gap_ = true;
        event_seq_ = e->seq();
        if (e->kind() == EventKind::Committed && e->model()) {
            uint64_t &v = latest_seen_[e->model()->str()];
            v = std::max(v, e->version());
        }
    } catch (const Error &e) {
        TH_LOG(Warn, "ignoring a malformed server event: ", e.what());
        return;
    }
    ev_cv_.notify_all();
}

void ServerSession::wait_for_commit(const std::string &model, uint64_t newer_than, const Deadline &until,
                                    CancelFlag cancel) {
    std::unique_lock lk(ev_mu_);
    event_gap_ = false;
    auto seen = [&] {
        auto it = latest_seen_.find(model);
        return event_gap_ || (it != latest_seen_.end() && it->second > newer_than);
    };
    // Nothing wakes it when the flag is set: with one, it looks every 20 ms.
    for (;;) {
        Deadline slice = cancel ? until.capped(20) : until;
        if (ev_cv_.wait_until(lk, slice.at(), seen) || canceled(cancel) || until.expired()) return;
    }
}

// After a server restart (or after being reported unreachable) the server has
// forgotten us: introduce ourselves again and re-declare every complete replica,
// so that the server rebuilds its view from the workers, which hold the truth.
bool ServerSession::reregister(const Deadline &deadline, uint64_t since) {
    std::shared_ptr<RpcClient> at = rpc();
    // The window after_declarations() waits out: opened just before the
    // Hello, closed however the declarations end.
    struct Declaring {
        ServerSession &s;
        bool open = false;
        void begin() {
            std::lock_guard lk(s.declaring_mu_);
            s.declaring_seq_++;
            open = true;
        }
        ~Declaring() {
            if (!open) return;
            {
                std::lock_guard lk(s.declaring_mu_);
                s.declaring_seq_++;
            }
            s.declaring_cv_.notify_all();
        }
    };
    try {
        bool said_hello = false;
        {
            Declaring window{*this};
            // Registrations take turns (the listener's lock): a later one
            // sees whether an earlier one did its work.
            listener_->register_again(
                [&] {
                    if (since != kEveryTime) {
                        {
                            std::lock_guard lk(hello_mu_);
                            if (registrations_ != since && hello_rpc_ == at) return false;
                        }
                        TH_LOG(Warn, "the server (", at->url(), ") does not know this worker; registering again");
                    }
                    // Holders re-declare within a heartbeat plus a call's
                    // timeout of noticing; those that have not by the end of a
                    // lease are gone anyway. Set before the Hello: other
                    // threads may reach the new server as soon as it is sent.
                    rebuilt_by_ = Clock::now() + std::chrono::milliseconds(lease_ms_.load() + cfg_.timeout_ms);
                    window.begin();
                    hello(deadline);
                    return said_hello = true;
                },
                deadline);
        }
        if (said_hello) resend_reports(deadline);
        return true;
    } catch (const LeftServerAlive &e) {
        // Our calls to the server we left were slow, not lost: moving on
        // would split the workers between two servers.
        go_back(at, e.what());
        return false;
    }
}

uint64_t ServerSession::declarations_seen() {
    std::lock_guard lk(declaring_mu_);
    return declaring_seq_;
}

bool ServerSession::after_declarations(uint64_t seen_at_send, const Deadline &deadline) {
    std::unique_lock lk(declaring_mu_);
    if (seen_at_send % 2 == 0 && declaring_seq_ == seen_at_send) return false;
    return declaring_cv_.wait_until(lk, deadline.at(), [&] { return declaring_seq_ % 2 == 0; });
}

void ServerSession::report_source(uint64_t worker, uint64_t replica, const std::string &why,
                                  const std::vector<uint32_t> &chunks, bool stalled, const Deadline &deadline) {
    if (!chunks.empty()) {
        constexpr size_t kMaxKept = 64;
        auto until = Clock::now() + std::chrono::milliseconds(lease_ms_.load() + cfg_.timeout_ms);
        std::lock_guard lk(reports_mu_);
        if (reports_.size() >= kMaxKept) reports_.erase(reports_.begin());
        reports_.push_back({worker, replica, why, chunks, until});
    }
    send_report(worker, replica, why, chunks, stalled, deadline, /*recover=*/true);
}

// Inside re-registration: no recovery (a failure here ends the attempt, not
// the registration), and the server may not know the replica yet: it keeps
// such reports until its holder declares it.
void ServerSession::resend_reports(const Deadline &deadline) {
    std::vector<SentReport> again;
    {
        std::lock_guard lk(reports_mu_);
        auto now = Clock::now();
        std::erase_if(reports_, [&](const SentReport &r) { return r.until < now; });
        again = reports_;
    }
    for (const SentReport &r : again) {
        TH_LOG(Info, "telling the server again that replica ", r.replica, " of worker ", r.worker,
               " had chunks that do not match their checksums");
        send_report(r.worker, r.replica, r.why, r.chunks, /*stalled=*/false, deadline, /*recover=*/false);
    }
}

void ServerSession::send_report(uint64_t worker, uint64_t replica, const std::string &why,
                                const std::vector<uint32_t> &chunks, bool stalled, const Deadline &deadline,
                                bool recover) {
    try {
        call(
            [&](Builder &b, const Header &h) {
                auto reason = b.CreateString(why);
                auto mismatched = chunks.empty() ? 0 : b.CreateVector(chunks);
                return finish(b, h, CreateSourceFailed(b, worker, reason, replica, mismatched, stalled));
            },
            deadline, recover);
    } catch (const std::exception &e) {
        TH_LOG(Warn, "could not report failed source ", worker, ": ", e.what());
    }
}

bool ServerSession::registered_address_is_current() {
    std::vector<uint8_t> now = ucx_->address();
    std::lock_guard lk(hello_mu_);
    return hello_address_ == now;
}

void ServerSession::address_changed() {
    std::lock_guard lk(hb_mu_);
    reregister_asked_ = true;
    hb_cv_.notify_all();
}

void ServerSession::beat_soon() {
    std::lock_guard lk(hb_mu_);
    beat_asked_ = true;
    hb_cv_.notify_all();
}

void ServerSession::beat() {
    Bytes reply = call([](Builder &b, const Header &h) { return finish(b, h, CreateHeartbeat(b)); },
                       Deadline(cfg_.timeout_ms));
    const Envelope *env = GetEnvelope(reply.data());
    if (env->body_type() != Body::HeartbeatReply) return;
    const HeartbeatReply *r = env->body_as_HeartbeatReply();
    const auto *d = aligned(r->drop(), "drop list");
    if (d != nullptr && d->size() > 0) listener_->drop_owned(std::vector<uint64_t>(d->begin(), d->end()));
    if (r->check() != nullptr)
        for (const ChunkCheck *c : *r->check())
            if (c->chunks() != nullptr && c->chunks()->size() > 0)
                listener_->check_reported(c->replica_id(), std::vector<uint32_t>(c->chunks()->begin(), c->chunks()->end()));
}

Bytes ServerSession::exchange(const std::shared_ptr<RpcClient> &rpc, const Bytes &request, const Deadline &deadline) {
    if (!can_fail_over()) return rpc->call(request, deadline);
    std::multiset<Clock::time_point>::iterator waiting;
    bool first;
    {
        std::lock_guard lk(watch_mu_);
        first = waiting_since_.empty();
        waiting = waiting_since_.insert(Clock::now());
    }
    // Otherwise the watcher already waits for an earlier call's turn.
    if (first) watch_cv_.notify_all();
    auto done = [&] {
        std::lock_guard lk(watch_mu_);
        waiting_since_.erase(waiting);
    };
    try {
        Bytes reply = rpc->call(request, deadline);
        done();
        return reply;
    } catch (...) {
        done();
        throw;
    }
}

// A call learns that its server is gone when its attempt runs out (half a
// call's timeout, 5 s by default), or in etcd mode when the server answers
// "not the leader". A leader that died or resigned kept every call waiting
// that long, while etcd had named the next one in well under a second after
// a resignation and within a lease after a crash; a listed server whose
// process ended did too, while its port refused every new connection.
// Checking only while a call waits keeps a quiet client from reading etcd at
// all.
void ServerSession::watch_calls() {
    std::unique_lock lk(watch_mu_);
    while (!watch_stop_) {
        if (waiting_since_.empty()) {
            watch_cv_.wait(lk);
            continue;
        }
        Clock::time_point due = *waiting_since_.begin() + kServerCheckAfter;
        if (Clock::now() < due) {
            watch_cv_.wait_until(lk, due);
            continue;
        }
        lk.unlock();
        if (leader_)
            follow_if_etcd_moved();
        else
            leave_if_disconnected();
        lk.lock();
        watch_cv_.wait_for(lk, kServerCheckEvery, [this] { return watch_stop_; });
    }
}

// fail_over() abandons the server left, which ends the calls waiting on it
// at once; they ask the new leader.
void ServerSession::follow_if_etcd_moved() {
    std::shared_ptr<RpcClient> from;
    LeaderRecord seen;
    {
        std::lock_guard lk(rpc_mu_);
        from = rpc_;
        seen = following_;
    }
    std::optional<LeaderRecord> named;
    try {
        named = leader_->current();
    } catch (const Error &e) {
        TH_LOG(Debug, "asking etcd for the leader: ", e.what());
        return;
    }
    if (!named || *named == seen) return;
    try {
        fail_over(from, str("etcd names ", named->url, " (epoch ", named->epoch, ") the leader now"), true,
                  Deadline(cfg_.timeout_ms));
    } catch (const Error &e) {
        // The calls that were waiting go on with the new leader themselves.
        TH_LOG(Info, "registering with the leader etcd names now failed: ", e.what());
    }
}

// A list: a server with no connection while a call waits on it, which a
// new connection does not reach either (its process ended: its port
// refuses; its host does not answer), is left for the next at once. One
// that is slow or paused keeps its connection, and its calls their whole
// attempt; one still being dialled or greeted (busy) takes the probe's
// connection. The next server takes over only if it finds this one silent
// too (Hello.left_url), else the worker comes back (go_back()).
void ServerSession::leave_if_disconnected() {
    constexpr uint32_t kProbeMs = 200;
    std::shared_ptr<RpcClient> from = rpc();
    if (from->connected() || confirmed_alive(from)) return;
    std::string why;
    try {
        check_dial(from->url(), kProbeMs);
        return;
    } catch (const Error &e) {
        why = e.what();
    }
    try {
        fail_over(from, str("no connection while a call waits (", why, ")"), false, Deadline(cfg_.timeout_ms));
    } catch (const Error &e) {
        TH_LOG(Info, "registering with the next server failed: ", e.what());
    }
}

void ServerSession::heartbeat_loop() {
    std::unique_lock lk(hb_mu_);
    bool warned = false, retry = false;
    while (!stop_) {
        hb_cv_.wait_for(lk, std::chrono::milliseconds(cfg_.heartbeat_ms),
                        [this] { return stop_ || reregister_asked_ || beat_asked_; });
        if (stop_) break;
        beat_asked_ = false;
        bool again = std::exchange(reregister_asked_, false) || retry;
        lk.unlock();
        // A call that found this worker unknown after the pause may have
        // registered the new address already: a second Hello would only make
        // the server forget our replicas until they are declared again.
        if (again && !retry && registered_address_is_current()) again = false;
        if (again) {
            try {
                // Not registered where we went back to: the next heartbeat tries.
                retry = !reregister(Deadline(cfg_.timeout_ms));
                if (!retry) TH_LOG(Info, "registered again with the new UCX address");
            } catch (const std::exception &e) {
                TH_LOG(Warn, "registering the new UCX address failed (retried at the next heartbeat): ", e.what());
                retry = true;
            }
        }
        try {
            beat();
            if (warned) TH_LOG(Warn, "server ", cfg_.server_url, " answers heartbeats again");
            warned = false;
        } catch (const std::exception &e) {
            if (!warned) TH_LOG(Warn, "heartbeat to ", cfg_.server_url, " failed: ", e.what());
            warned = true;
        }
        lk.lock();
    }
}

}  // namespace th
