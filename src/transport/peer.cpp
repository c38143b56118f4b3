#include "transport/peer.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/error.hpp"
#include "common/log.hpp"
#include "transport/reads.hpp"
#include "transport/worker.hpp"

namespace th {

namespace {

// Transports that read a holder's memory without its CPU: RDMA (rc, dc, and
// their accelerated variants), the kernel's cross-memory attach and its
// relatives on one host, and GPU peer access. Prefixes of UCX's names.
constexpr const char *kOneSided[] = {"rc", "dc", "cma", "knem", "xpmem", "cuda_ipc", "rocm_ipc", "gdr_copy"};

[[maybe_unused]] bool reads_one_sided(const char *transport) {
    for (const char *t : kOneSided)
        if (std::strncmp(transport, t, std::strlen(t)) == 0) return true;
    return false;
}

// Force-closes ep; the close request while it is in progress, else nullptr.
void *close_forced(ucp_ep_h ep) {
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    prm.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void *req = ucp_ep_close_nbx(ep, &prm);
    return UCS_PTR_IS_PTR(req) ? req : nullptr;
}

// Sleeps while pending() holds, until `until` or until told to stop.
template <typename Pending>
void wait_while(Pending pending, std::chrono::steady_clock::time_point until, const std::atomic<bool> *stop) {
    while (pending() && std::chrono::steady_clock::now() < until && !(stop && stop->load()))
        std::this_thread::sleep_for(std::chrono::microseconds(50));
}

}  // namespace

const char *read_path_name(ReadPath p) { return p == ReadPath::OneSided ? "one-sided GET" : "active-message pull"; }

Peer::~Peer() = default;

std::shared_ptr<Peer> Peer::create(UcxWorker *w, uint64_t worker_id, const std::vector<uint8_t> &address) {
    auto p = std::make_shared<Peer>();
    p->worker_ = w;
    p->worker_id_ = worker_id;
    p->address_ = address;
    return p;
}

ucp_ep_params_t Peer::endpoint_params() {
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t *>(address_.data());
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = &Peer::on_error;
    ep.err_handler.arg = this;
    return ep;
}

std::vector<void *> Peer::drop_endpoints(bool close) {
    std::vector<void *> closing;
    for (size_t slot = 0; slot < eps_.size(); ++slot) {
        // A copy worker lives on: its endpoints are closed whatever happened
        // to the main one.
        bool close_it = close || slot >= kLanes;
        if (close_it)
            for (auto &[packed, rkey] : rkeys_[slot]) ucp_rkey_destroy(rkey);
        rkeys_[slot].clear();  // not closed: they belong to a set-aside worker, leaked with it
        ucp_ep_h &ep = eps_[slot];
        if (ep != nullptr && close_it) {
            if (void *req = close_forced(ep)) closing.push_back(req);
        }
        ep = nullptr;
    }
    return closing;
}

ucp_rkey_h Peer::rkey(size_t slot, const std::vector<uint8_t> &packed, ucs_status_t *st) {
    auto &cache = rkeys_[slot];
    auto it = cache.find(packed);
    if (it != cache.end()) return it->second;
    ucp_rkey_h r = nullptr;
    *st = ucp_ep_rkey_unpack(eps_[slot], packed.data(), &r);
    if (*st != UCS_OK) return nullptr;
    cache.emplace(packed, r);
    return r;
}

void Peer::choose_path(bool one_sided_allowed) {
    path_ = ReadPath::ActiveMessage;
#if UCP_API_VERSION >= UCP_VERSION(1, 19)
    ucp_transport_entry_t entries[16];
    ucp_ep_attr_t attr{};
    attr.field_mask = UCP_EP_ATTR_FIELD_TRANSPORTS;
    attr.transports.entries = entries;
    attr.transports.num_entries = 16;
    attr.transports.entry_size = sizeof(ucp_transport_entry_t);
    if (ucp_ep_query(lane(Lane::Data), &attr) == UCS_OK) {
        bool one_sided = false;
        transports_.clear();
        for (unsigned i = 0; i < attr.transports.num_entries; ++i) {
            const ucp_transport_entry_t &e = entries[i];
            if (e.transport_name == nullptr) continue;
            if (!transports_.empty()) transports_ += ' ';
            transports_ += str(e.transport_name, "/", e.device_name ? e.device_name : "?");
            one_sided = one_sided || reads_one_sided(e.transport_name);
        }
        if (one_sided && one_sided_allowed) path_ = ReadPath::OneSided;
    }
#else
    (void)one_sided_allowed;
    transports_ = "(this UCX cannot say)";
#endif
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

PeerRef UcxWorker::peer(uint64_t worker_id, const std::vector<uint8_t> &address) {
    std::vector<PeerOrError> one = peers({{worker_id, address}});
    if (!one[0].peer) fail(TH_ERR_TRANSPORT, one[0].error);
    return one[0].peer;
}

std::vector<UcxWorker::PeerOrError> UcxWorker::peers(const std::vector<PeerAddress> &wanted,
                                                     const std::atomic<bool> *stop) {
    std::vector<PeerOrError> out(wanted.size());
    std::vector<PeerRef> to_greet;
    std::vector<std::unique_lock<std::mutex>> greetings;  // held until they are greeted
    {
        std::lock_guard lk(mu_);
        for (size_t i = 0; i < wanted.size(); ++i) {
            const auto &[worker_id, address] = wanted[i];
            auto it = peers_.find(worker_id);
            if (it != peers_.end() && !it->second->failed() && it->second->address_ == address) {
                out[i].peer = it->second;
                continue;
            }
            out[i] = connect(worker_id, address, greetings, to_greet);
        }
    }
    greet(to_greet, stop);
    // One that did not answer may have been given an endpoint its process
    // had closed (ucx_env.hpp, KEEPALIVE_INTERVAL): once more, afresh.
    std::vector<PeerRef> again;
    if (!(stop && stop->load())) {
        std::lock_guard lk(mu_);
        for (size_t i = 0; i < wanted.size(); ++i) {
            const PeerRef &p = out[i].peer;
            if (!p || p->greeted_ || std::find(to_greet.begin(), to_greet.end(), p) == to_greet.end()) continue;
            TH_LOG(Info, "connecting to worker ", wanted[i].first, " again");
            out[i] = connect(wanted[i].first, wanted[i].second, greetings, again);
        }
    }
    greet(again, stop);
    to_greet.insert(to_greet.end(), again.begin(), again.end());
    greetings.clear();
    // Peers another thread created: until it has greeted them.
    for (const PeerOrError &o : out)
        if (o.peer && std::find(to_greet.begin(), to_greet.end(), o.peer) == to_greet.end())
            std::lock_guard wait(o.peer->greeting_);
    return out;
}

// A new peer in place of any before it (whose endpoints are closed; whoever
// still uses them sees them fail). One whose reads are answered by its
// process is added to to_greet, its greeting lock to greetings. Caller holds
// mu_.
UcxWorker::PeerOrError UcxWorker::connect(uint64_t worker_id, const std::vector<uint8_t> &address,
                                          std::vector<std::unique_lock<std::mutex>> &greetings,
                                          std::vector<PeerRef> &to_greet) {
    PeerOrError out;
    PeerRef p = Peer::create(this, worker_id, address);
    ucp_ep_params_t ep = p->endpoint_params();
    ucs_status_t st = UCS_OK;
    for (ucp_ep_h &e : p->eps_) {
        st = ucp_ep_create(main_.worker, &ep, &e);
        if (st != UCS_OK) break;
    }
    if (st != UCS_OK) {
        for (void *req : p->drop_endpoints(/*close=*/true)) ucp_request_free(req);
        out.error = str("cannot connect to worker ", worker_id, ": ", ucs_status_string(st));
        return out;
    }
    p->choose_path(one_sided_);
    if (p->path_ == ReadPath::OneSided && make_copiers()) add_copy_endpoints(*p, ep);
    TH_LOG(Debug, "worker ", worker_id, ": ", read_path_name(p->path_), " over ", p->transports_,
           p->copy_slots() > 0 ? str(", posted by ", p->copy_slots() + 1, " threads") : std::string());
    // Only the active-message path over tcp needs the greeting (see greet).
    // Taken while nobody else can know the peer, so it cannot wait; a try
    // says so (peers() takes mu_ again while holding the greeting locks of
    // the first round).
    if (p->path_ == ReadPath::ActiveMessage) {
        greetings.emplace_back(p->greeting_, std::try_to_lock);
        to_greet.push_back(p);
    }
    auto it = peers_.find(worker_id);
    if (it != peers_.end()) {
        PeerRef old = it->second;
        it->second = p;
        std::lock_guard plk(old->mu_);
        for (void *req : old->drop_endpoints(/*close=*/true)) ucp_request_free(req);
    } else {
        peers_.emplace(worker_id, p);
    }
    out.peer = p;
    return out;
}

// Over tcp each side of an endpoint connects a socket of its own, the peer
// its side when it first answers, and UCX (1.13) merges the two. A request
// that arrives while the merge is under way can be read from a socket UCX has
// just handed over: it logs "recv(-1) failed" and fails the endpoint. So the
// peer answers one empty read on each lane, one lane at a time, before any
// other traffic; a peer that does not answer in time is left to the reads'
// own deadlines. One-sided reads need no answer and no greeting. Several new
// peers (a striped plan's sources) are greeted together: their round trips
// overlap instead of adding up.
void UcxWorker::greet(std::vector<PeerRef> ps, const std::atomic<bool> *stop) {
    constexpr auto kGreetLimit = std::chrono::milliseconds(1000);
    auto until = std::chrono::steady_clock::now() + kGreetLimit;
    for (Lane l : {Lane::Data, Lane::Control}) {
        if (ps.empty()) return;
        std::vector<std::shared_ptr<std::atomic<int>>> answered;  // 1: not yet, 0: answered, -1: failed
        for (const PeerRef &p : ps) {
            auto a = std::make_shared<std::atomic<int>>(1);
            answered.push_back(a);
            read(p, l, nullptr, 0, nullptr, 0, {}, [a](const char *error) { a->store(error ? -1 : 0); });
        }
        ucp_worker_signal(main_.worker);
        wait_while([&] { return std::any_of(answered.begin(), answered.end(), [](auto &a) { return a->load() == 1; }); },
                   until, stop);
        if (stop && stop->load()) return;
        // One that did not answer is left to the reads' deadlines.
        std::vector<PeerRef> next;
        for (size_t i = 0; i < ps.size(); ++i) {
            if (answered[i]->load() == 0) {
                next.push_back(ps[i]);
                continue;
            }
            TH_LOG(Info, "worker ", ps[i]->worker_id_, " did not answer a first read within ", kGreetLimit.count(), " ms",
                   answered[i]->load() < 0 ? " (failed)" : "");
        }
        ps = std::move(next);
    }
    for (const PeerRef &p : ps) p->greeted_ = true;
}

size_t UcxWorker::connect_ahead(const std::vector<PeerAddress> &workers, const std::atomic<bool> *stop) {
    std::vector<PeerOrError> got = peers(workers, stop);  // the active-message path greets them
    size_t up = 0;
    for (size_t i = 0; i < got.size() && !(stop && stop->load()); ++i) {
        if (!got[i].peer) {
            TH_LOG(Debug, "connecting ahead to worker ", workers[i].first, ": ", got[i].error);
            continue;
        }
        up += wired_up(got[i].peer, stop);
    }
    return stop && stop->load() ? 0 : up;  // maybe not greeted: told to stop
}

bool UcxWorker::wired_up(const PeerRef &p, const std::atomic<bool> *stop) {
    if (p->path_ == ReadPath::ActiveMessage) return p->greeted_ && !p->failed();
    // One-sided lanes wire up on first use: a flush makes them.
    constexpr auto kLimit = std::chrono::milliseconds(1000);
    for (size_t slot = 0; slot < p->eps_.size(); ++slot) {
        auto done = std::make_shared<std::atomic<int>>(1);  // 1: not yet
        ucp_request_param_t prm{};
        prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
        auto *hold = new std::shared_ptr<std::atomic<int>>(done);
        prm.user_data = hold;
        prm.cb.send = [](void *request, ucs_status_t st, void *user_data) {
            auto *d = static_cast<std::shared_ptr<std::atomic<int>> *>(user_data);
            (*d)->store(st == UCS_OK ? 0 : -1);
            delete d;
            ucp_request_free(request);
        };
        ucs_status_ptr_t req;
        {
            std::lock_guard lk(p->mu_);
            if (p->eps_[slot] == nullptr) {
                delete hold;
                return false;
            }
            req = ucp_ep_flush_nbx(p->eps_[slot], &prm);
        }
        if (!UCS_PTR_IS_PTR(req)) {
            delete hold;
            if (UCS_PTR_IS_ERR(req)) return false;
            continue;
        }
        ucp_worker_signal(slot < Peer::kLanes ? main_.worker.load() : copiers_[slot - Peer::kLanes]->worker.load());
        wait_while([&] { return done->load() == 1; }, std::chrono::steady_clock::now() + kLimit, stop);
        if (done->load() != 0) return false;
    }
    return true;
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
    ucp_worker_signal(main_.worker);
}

// One data endpoint on each copy worker, or none (a failure leaves the peer
// to the main worker alone). Caller holds mu_; p is not shared yet.
void UcxWorker::add_copy_endpoints(Peer &p, const ucp_ep_params_t &params) {
    for (const auto &e : copiers_) {
        ucp_ep_h ep = nullptr;
        ucs_status_t st = ucp_ep_create(e->worker, &params, &ep);
        if (st != UCS_OK) {
            TH_LOG(Info, "worker ", p.worker_id_, ": no endpoint on a copy worker (", ucs_status_string(st),
                   "); the progress thread posts its reads");
            for (size_t slot = Peer::kLanes; slot < p.eps_.size(); ++slot)
                if (void *req = close_forced(p.eps_[slot])) ucp_request_free(req);
            p.eps_.resize(Peer::kLanes);
            p.rkeys_.resize(Peer::kLanes);
            return;
        }
        p.eps_.push_back(ep);
        p.rkeys_.emplace_back();
    }
}

}  // namespace th
