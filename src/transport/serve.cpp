// The holder's side of the active-message read path: answering read
// requests from the registered memory of replicas it holds, and waiting
// reads once it holds their bytes. One-sided reads never reach this
// process's CPU.
#include <algorithm>
#include <cstring>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/trace.hpp"
#include "transport/reads.hpp"

namespace th {

namespace {

// An answer being sent: what must live until UCX is done. Its region's
// `answering` counted it: the region stays registered until it is done.
struct Answer {
    ReadReplyHeader header;
    MemRegion *region;
    ~Answer() {
        if (region) region->answering--;
    }
};

// Sends one answer on the reply endpoint: n bytes at bytes (from region's
// registered memory, its `answering` counted for this answer), or only the
// header. False if UCX refused it at once.
bool send_answer(ucp_ep_h reply_ep, const ReadReplyHeader &header, MemRegion *region, const void *bytes, size_t n) {
    auto *a = new Answer{header, region};
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
    if (a->region) {
        prm.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH | UCP_OP_ATTR_FIELD_MEMORY_TYPE;
        prm.memh = a->region->memh;
        prm.memory_type = a->region->kind == TH_MEM_CUDA ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
    }
    ucs_status_ptr_t req = ucp_am_send_nbx(reply_ep, kReadReply, &a->header, sizeof a->header, bytes, n, &prm);
    if (UCS_PTR_IS_PTR(req)) return true;  // completes later: prm.cb.send
    delete a;
    return !UCS_PTR_IS_ERR(req);
}

}  // namespace

namespace {

// Whether a request arrived whole, as a request of ours, with somebody to
// answer; warns about one that did not (and releases a rendezvous).
bool well_formed(ucp_worker_h worker, size_t header_length, size_t expected, void *data, size_t length,
                 size_t max_payload, const ucp_am_recv_param_t *param) {
    bool rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    if (header_length == expected && !rndv && length <= max_payload &&
        (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) != 0)
        return true;
    if (rndv) ucp_am_data_release(worker, data);
    TH_LOG(Warn, "dropped a malformed read request (", header_length, "-byte header, ", length, "-byte payload)");
    return false;
}

enum class Held { Yes, NotYet, Changed, Nowhere };

// Whether the word at gen_at still shows generation.
bool holds(const Registry &registry, uint64_t gen_at, uint64_t generation) {
    uint64_t gen = 0;
    return registry.read_word(gen_at, 8, &gen) && gen == generation;
}

// What a waiting read's words say now: read only while they lie in memory
// this process exposes (a control page withdraws its registration before it
// is freed), else Nowhere. A generation that ended is still held by a copy
// made of it while the copy's generation holds (copies are complete).
Held held(const Registry &registry, const Successions &successions, const WaitingReadHeader &w) {
    uint64_t gen = 0, level = 0;
    if (!registry.read_word(w.gen_at, 8, &gen) || !registry.read_word(w.level_at, 4, &level)) return Held::Nowhere;
    if (gen != w.generation) {
        std::optional<Moved> copy = successions.of(w.gen_at, w.generation);
        return copy && holds(registry, copy->gen_at, copy->generation) ? Held::Yes : Held::Changed;
    }
    return level >= w.need ? Held::Yes : Held::NotYet;
}

}  // namespace

ucs_status_t UcxWorker::on_read_request(void *arg, const void *header, size_t header_length, void *data, size_t length,
                                        const ucp_am_recv_param_t *param) {
    auto *self = static_cast<UcxWorker *>(arg);
    if (!well_formed(self->main_.worker.load(), header_length, sizeof(ReadRequestHeader), data, length, kMaxRkey, param))
        return UCS_OK;
    ReadRequestHeader h{};
    std::memcpy(&h, header, sizeof h);
    // Answered here, inside the handler: the reply endpoint is only known to
    // be valid until the handler returns.
    self->answer(param->reply_ep, h, static_cast<const uint8_t *>(data), length);
    return UCS_OK;
}

// A waiting read is answered at once when its bytes are here or its replica
// changed; else it is parked, and answered on an endpoint of this process's
// own to the reader (answer_parked): the one it came on may be gone by then.
ucs_status_t UcxWorker::on_waiting_read(void *arg, const void *header, size_t header_length, void *data, size_t length,
                                        const ucp_am_recv_param_t *param) {
    auto *self = static_cast<UcxWorker *>(arg);
    if (!well_formed(self->main_.worker.load(), header_length, sizeof(WaitingReadHeader), data, length,
                     kMaxRkey + kMaxAddress, param))
        return UCS_OK;
    WaitingReadHeader w{};
    std::memcpy(&w, header, sizeof w);
    auto *payload = static_cast<const uint8_t *>(data);
    Held now = w.rkey_bytes <= length && w.rkey_bytes <= kMaxRkey ? held(self->registry_, self->successions_, w) : Held::Nowhere;
    switch (now) {
    case Held::Yes:
        self->answer(param->reply_ep, w.read, payload, w.rkey_bytes, &w);
        return UCS_OK;
    case Held::Nowhere:
        TH_LOG(Warn, "refused a waiting read whose fill level is not in memory this process serves");
        [[fallthrough]];
    case Held::Changed:
        self->answer_status(param->reply_ep, w.read.id, UCS_ERR_INVALID_ADDR);  // gone: kReadRefused
        return UCS_OK;
    case Held::NotYet:
        break;
    }
    {
        // Handlers may also run on a thread that progresses the worker while
        // it goes (~UcxWorker): the list has a lock, never held into UCX.
        std::lock_guard lk(self->parked_mu_);
        if (self->parked_.size() < kMaxParked && length > w.rkey_bytes) {
            trace::event("park", w.read.remote, w.need);
            self->parked_.push_back(Parked{w, std::vector<uint8_t>(payload, payload + w.rkey_bytes),
                                           std::string(payload + w.rkey_bytes, payload + length),
                                           std::chrono::steady_clock::now() + kMaxWait});
            self->parked_count_ = self->parked_.size();
            self->parked_changed_ = true;  // its answer endpoint is made at once
            return UCS_OK;
        }
    }
    self->answer_status(param->reply_ep, w.read.id, kNotYet);
    return UCS_OK;
}

void UcxWorker::look_at_parked(std::chrono::steady_clock::time_point now) {
    if (parked_count_.load(std::memory_order_relaxed) == 0 && answer_peers_.empty() && answer_closes_.empty()) return;
    if (!parked_changed_.exchange(false) && now < next_look_) return;
    next_look_ = now + kParkedLook;
    answer_parked();
}

void UcxWorker::answer_parked() {
    auto now = std::chrono::steady_clock::now();
    std::vector<Parked> parked, keep;
    {
        std::lock_guard lk(parked_mu_);
        parked.swap(parked_);
    }
    for (Parked &p : parked) {
        // The endpoint to the reader is made as soon as a read waits, so
        // that it is greeted by the time the answer is due.
        bool failed = false;
        PeerRef to = answer_peer(p.reader, &failed);
        Held h = held(registry_, successions_, p.h);
        bool due = h != Held::NotYet || now >= p.until;
        if (!failed && (!due || (!to && now < p.until + kMaxWait))) {
            keep.push_back(std::move(p));  // not due yet, or its endpoint is still being greeted
            continue;
        }
        if (to) {
            std::lock_guard plk(to->mu_);
            ucp_ep_h ep = to->lane(Lane::Data);
            if (ep != nullptr && !to->failed()) {
                if (h == Held::Yes) {
                    waits_answered_++;
                    answer(ep, p.h.read, p.rkey.data(), p.rkey.size(), &p.h);
                } else {
                    answer_status(ep, p.h.read.id, h == Held::NotYet ? kNotYet : UCS_ERR_INVALID_ADDR);
                }
            }
        }
        // Without an endpoint to the reader the read is left to its deadline.
    }
    {
        // Those parked meanwhile come after: chunks are answered in the order
        // they were asked for.
        std::lock_guard lk(parked_mu_);
        keep.insert(keep.end(), std::make_move_iterator(parked_.begin()), std::make_move_iterator(parked_.end()));
        parked_.swap(keep);
        parked_count_ = parked_.size();
    }
    // Answer endpoints nobody used for a while, and failed ones, go.
    if (now - last_sweep_ < std::chrono::seconds(1)) return;
    last_sweep_ = now;
    for (auto it = answer_peers_.begin(); it != answer_peers_.end();) {
        AnswerPeer &a = it->second;
        if (!a.peer->failed() && a.greeted->load() >= 0 && now - a.used < kAnswerPeerIdle) {
            ++it;
            continue;
        }
        std::lock_guard plk(a.peer->mu_);
        for (void *req : a.peer->drop_endpoints(/*close=*/true)) answer_closes_.push_back(req);
        it = answer_peers_.erase(it);
    }
    std::erase_if(answer_closes_, [](void *req) {
        if (ucp_request_check_status(req) == UCS_INPROGRESS) return false;
        ucp_request_free(req);
        return true;
    });
}

PeerRef UcxWorker::answer_peer(const std::string &address, bool *failed) {
    auto now = std::chrono::steady_clock::now();
    auto it = answer_peers_.find(address);
    if (it != answer_peers_.end()) {
        AnswerPeer &a = it->second;
        int g = a.greeted->load();
        *failed = g < 0 || a.peer->failed();
        if (*failed || g != 0) return nullptr;
        a.used = now;
        return a.peer;
    }
    if (answer_peers_.size() >= kMaxAnswerPeers) {
        *failed = true;
        return nullptr;
    }
    PeerRef p = Peer::create(this, 0, std::vector<uint8_t>(address.begin(), address.end()));  // known by its address only
    ucp_ep_params_t ep = p->endpoint_params();
    // One endpoint: answers need no control lane.
    if (ucs_status_t st = ucp_ep_create(main_.worker, &ep, &p->lane(Lane::Data)); st != UCS_OK) {
        TH_LOG(Warn, "cannot connect back to a reader to answer its waiting reads: ", ucs_status_string(st));
        p->lane(Lane::Data) = nullptr;
        *failed = true;
        return nullptr;
    }
    auto greeted = std::make_shared<std::atomic<int>>(1);
    answer_peers_.emplace(address, AnswerPeer{p, greeted, now});
    read(p, Lane::Data, nullptr, 0, nullptr, 0, {}, [this, greeted](const char *error) {
        greeted->store(error ? -1 : 0);
        parked_changed_ = true;  // its reads may be answered now
    });
    *failed = false;
    return nullptr;
}

void UcxWorker::drop_answer_peers(bool close) {
    {
        std::lock_guard lk(parked_mu_);
        parked_.clear();
        parked_count_ = 0;
    }
    // Close requests of a set-aside worker are never touched again.
    if (!close) answer_closes_.clear();
    for (auto &[address, a] : answer_peers_) {
        std::lock_guard plk(a.peer->mu_);
        for (void *req : a.peer->drop_endpoints(close)) answer_closes_.push_back(req);
    }
    answer_peers_.clear();
}

void UcxWorker::answer_status(ucp_ep_h ep, uint64_t id, ucs_status_t status) {
    answers_sent_++;
    send_answer(ep, ReadReplyHeader{id, status, 0}, nullptr, nullptr, 0);
}

void UcxWorker::answer(ucp_ep_h ep, const ReadRequestHeader &h, const uint8_t *rkey, size_t rkey_len,
                       const WaitingReadHeader *guard) {
    trace::event("serve", h.remote, h.length);
    ReadReplyHeader reply{h.id, UCS_OK, 0};
    MemRegion *region = nullptr;
    uint64_t from = h.remote;
    if (h.length == 0) {
        // A ping: answered with no bytes.
    } else if (h.length > kMaxRead) {
        reply.status = UCS_ERR_INVALID_PARAM;
    } else {
        region = registry_.served(h.remote, h.length, rkey, rkey_len);
        if (!region) reply.status = UCS_ERR_INVALID_ADDR;
    }
    // The generation is looked at once the answer is counted: whoever ends
    // the generation and then waits for the region's answers either waits
    // for this one or is seen here (Registry::read_word). One that ended is
    // answered from a copy made of it, under the copy's generation, looked
    // at the same way; else refused quietly, as a waiting read's is: its
    // reader learns it from the word anyway.
    if (guard && h.length > 0 && h.length <= kMaxRead && !(region && holds(registry_, guard->gen_at, guard->generation))) {
        if (region) region->answering--;
        region = nullptr;
        if (std::optional<Moved> m =
                successions_.moved(guard->gen_at, guard->generation, h.remote, h.length, rkey, rkey_len)) {
            region = registry_.served(m->remote, h.length, m->rkey.data(), m->rkey.size());
            if (region && !holds(registry_, m->gen_at, m->generation)) {
                region->answering--;
                region = nullptr;
            }
            from = m->remote;
        }
        // Once per copy: its readers see nothing of it.
        if (region && successions_.answered(guard->gen_at, guard->generation))
            TH_LOG(Info, "a replica changed while read; its spilled copy answers its readers' reads from now on");
        if (!region) {
            answer_status(ep, h.id, UCS_ERR_INVALID_ADDR);
            return;
        }
        trace::event("serve_copy", h.remote, h.length);
        reply.status = UCS_OK;
    }
    if (reply.status != UCS_OK) {
        // Every reader still reading a replica just released asks for it
        // until it learns: one warning a second, with how many more there were.
        auto now = std::chrono::steady_clock::now().time_since_epoch().count();
        auto last = refusal_logged_.load(std::memory_order_relaxed);
        if (now - last >= std::chrono::steady_clock::duration(std::chrono::seconds(1)).count() &&
            refusal_logged_.compare_exchange_strong(last, now)) {
            uint64_t more = refusals_unlogged_.exchange(0);
            TH_LOG(Warn, "refused to serve a read of ", h.length, " bytes at 0x", std::hex, h.remote, std::dec, ": ",
                   reply.status == UCS_ERR_INVALID_ADDR ? "no replica of this process with that key holds it"
                                                       : "longer than any read",
                   more > 0 ? str(" (and ", more, " more since the last such warning)") : std::string());
        } else {
            refusals_unlogged_++;
        }
    }
    if (!region) {
        answer_status(ep, h.id, static_cast<ucs_status_t>(reply.status));
        return;
    }
    // served() counted the first answer; the others are counted before any
    // is sent (one that completes at once must not leave the region with no
    // answer counted while more are to come), and those never sent are
    // counted down again.
    uint64_t piece = h.length > kAnsweredWhole ? kMaxAnswer : h.length;
    int pieces = static_cast<int>((h.length + piece - 1) / piece);
    region->answering += pieces - 1;
    for (uint64_t off = 0; off < h.length; off += piece, --pieces) {
        reply.offset = static_cast<uint32_t>(off);
        answers_sent_++;  // before it may arrive
        if (!send_answer(ep, reply, region, reinterpret_cast<const void *>(from + off),
                         std::min(piece, h.length - off))) {
            // This one was counted down with its Answer; the region is not
            // touched once no count of this call is left.
            if (pieces > 1) region->answering -= pieces - 1;
            break;  // the endpoint failed: the reader sees it, or its deadline passes
        }
    }
}

}  // namespace th
