// The reader's side of the data plane: reads are queued by any thread and
// posted by the progress thread, as one-sided GETs or as read requests that
// the holder answers (peer.hpp says which, per peer).
#include <sys/random.h>

#include <algorithm>
#include <cstring>

#include "common/error.hpp"
#include "common/log.hpp"
#include "transport/memory_kind.hpp"
#include "transport/reads.hpp"

namespace th {

const char *const kReadRefused = "the holder no longer serves that memory";
const char *const kReadNotYet = "the holder did not get the bytes in time";
const char *const kReadReset = "the holder's side closed the connection";

namespace {

// What a read's callback is told: a static text, never a UCX code.
const char *describe(ucs_status_t st) {
    if (st == UCS_OK) return nullptr;
    if (st == kDroppedByPause) return "dropped: this process was paused";
    if (st == UCS_ERR_CANCELED) return "the endpoint was closed";
    if (st == UCS_ERR_INVALID_ADDR) return kReadRefused;
    if (st == kNotYet) return kReadNotYet;
    if (st == UCS_ERR_CONNECTION_RESET) return kReadReset;
    return ucs_status_string(st);
}

ucs_memory_type_t memory_type(const MemRegion *r) {
    return r != nullptr && r->kind == TH_MEM_CUDA ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
}

}  // namespace

void UcxWorker::finish(PendingRead *g, ucs_status_t status) {
    g->engine->outstanding.fetch_sub(1, std::memory_order_relaxed);
    if (g->pull) g->engine->pulls.fetch_sub(1, std::memory_order_relaxed);
    g->cb(describe(status));
    delete g;
}

// Whoever takes a read out of pending_ completes it: its answer or GET
// completion, a failure of its endpoint, or a restart that sets its worker
// aside.
UcxWorker::PendingRead *UcxWorker::take_pending(uint64_t id) {
    std::lock_guard lk(pending_mu_);
    auto it = pending_.find(id);
    if (it == pending_.end()) return nullptr;
    PendingRead *g = it->second;
    pending_.erase(it);
    return g;
}

void UcxWorker::complete(uint64_t id, ucs_status_t status) {
    if (PendingRead *g = take_pending(id)) finish(g, status);
}

uint64_t UcxWorker::add_pending(PendingRead *g) {
    uint64_t id = 0;
    std::lock_guard lk(pending_mu_);
    do {
        // Random, so that no peer can guess the id of a read it was not
        // asked and answer it; 0 is never used.
        if (getrandom(&id, sizeof id, 0) != sizeof id) id = ++id_state_ * 0x9E3779B97F4A7C15ull;
    } while (id == 0 || !pending_.emplace(id, g).second);
    return id;
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

void UcxWorker::fail_reads(const Peer *peer, ucs_status_t status) {
    fail_reads([peer](const PendingRead &g) { return g.peer == peer; }, status);
}

void UcxWorker::read(const PeerRef &peer, Lane lane, void *local, uint64_t n, const MemRegion *local_region,
                     uint64_t remote, const std::vector<uint8_t> &rkey, ReadCallback cb, std::optional<WaitFor> wait) {
    if (peer->path() == ReadPath::OneSided) wait.reset();
    if (peer->path() == ReadPath::OneSided || n <= kMaxRead)
        return read_piece(peer, lane, local, n, local_region, remote, rkey, std::move(cb), wait);
    // Longer than one request may ask for: several requests; cb runs once,
    // when the last is in, with the first failure if any.
    struct Parts {
        std::atomic<uint64_t> left;
        std::atomic<const char *> error{nullptr};
        ReadCallback cb;
    };
    auto parts = std::make_shared<Parts>();
    parts->left = (n + kMaxRead - 1) / kMaxRead;
    parts->cb = std::move(cb);
    for (uint64_t off = 0; off < n; off += kMaxRead) {
        read_piece(peer, lane, static_cast<uint8_t *>(local) + off, std::min(kMaxRead, n - off), local_region,
                   remote + off, rkey, [parts](const char *error) {
                       const char *none = nullptr;
                       if (error != nullptr) parts->error.compare_exchange_strong(none, error);
                       if (parts->left.fetch_sub(1) == 1) parts->cb(parts->error.load());
                   }, wait);
    }
}

void UcxWorker::read_piece(const PeerRef &peer, Lane lane, void *local, uint64_t n, const MemRegion *local_region,
                           uint64_t remote, const std::vector<uint8_t> &rkey, ReadCallback cb,
                           std::optional<WaitFor> wait) {
    if (peer->failed()) {
        cb(describe(UCS_ERR_CONNECTION_RESET));
        return;
    }
    th_mem_kind kind = local_region != nullptr ? local_region->kind : TH_MEM_HOST;
    // A data read of a peer read one-sided into host memory goes to the
    // engine with the fewest reads outstanding, the main one on a tie: reads
    // in flight together are copied by as many threads, and one read at a
    // time stays on one thread, which is still awake from the last (taking
    // turns, each read woke a thread that had gone to sleep: 9% slower than
    // one thread at one read in flight). Everything else is the main's.
    Engine *engine = &main_;
    size_t slot = static_cast<size_t>(lane);
    if (lane == Lane::Data && kind == TH_MEM_HOST && peer->copy_slots() > 0 && copiers_up_.load()) {
        uint32_t least = main_.outstanding.load(std::memory_order_relaxed);
        for (size_t i = 0; i < peer->copy_slots() && least > 0; ++i) {
            uint32_t n_i = copiers_[i]->outstanding.load(std::memory_order_relaxed);
            if (n_i < least) {
                least = n_i;
                engine = copiers_[i].get();
                slot = Peer::kLanes + i;
            }
        }
    }
    bool pull = peer->path() != ReadPath::OneSided;
    engine->outstanding.fetch_add(1, std::memory_order_relaxed);
    if (pull) engine->pulls.fetch_add(1, std::memory_order_relaxed);
    uint64_t id =
        add_pending(new PendingRead{peer.get(), engine, engine->worker.load(), local, n, kind, std::move(cb), pull});
    bool was_empty;
    {
        std::lock_guard lk(engine->outbox_mu);
        was_empty = engine->outbox.empty();
        engine->outbox.push_back(Outgoing{peer, slot, id, ReadRequestHeader{id, remote, n}, wait, rkey, local, local_region});
    }
    // The engine's thread posts it; one wake-up per batch it has not seen.
    if (was_empty) ucp_worker_signal(engine->worker);
}

size_t UcxWorker::send_outbox(Engine &e) {
    std::vector<Outgoing> batch;
    {
        std::lock_guard lk(e.outbox_mu);
        batch.swap(e.outbox);
    }
    for (Outgoing &o : batch) send(o, /*cancel=*/false);
    return batch.size();
}

void UcxWorker::send(Outgoing &o, bool cancel) {
    std::unique_lock plk(o.peer->mu_);
    ucp_ep_h ep = o.peer->eps_[o.slot];
    if (cancel || o.peer->failed() || ep == nullptr) {
        plk.unlock();
        complete(o.id, cancel ? UCS_ERR_CANCELED : UCS_ERR_CONNECTION_RESET);
        return;
    }
    if (o.peer->path() == ReadPath::OneSided && o.header.length > 0) {
        ucs_status_t st = UCS_OK;
        ucp_rkey_h rkey = o.peer->rkey(o.slot, o.rkey, &st);
        if (rkey == nullptr) {
            plk.unlock();
            TH_LOG(Warn, "cannot unpack the remote key of worker ", o.peer->worker_id(), ": ", ucs_status_string(st));
            complete(o.id, st);
            return;
        }
        post_get(o, ep, rkey);
    } else {
        post_request(o, ep);
    }
}

// A one-sided read straight into the destination; the holder's CPU takes no
// part. The completion callback runs on the progress thread.
void UcxWorker::post_get(Outgoing &o, ucp_ep_h ep, ucp_rkey_h rkey) {
    struct Op {
        UcxWorker *owner;
        uint64_t id;
    };
    auto *op = new Op{this, o.id};
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    prm.memory_type = memory_type(o.local_region);
    if (o.local_region != nullptr) {
        prm.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        prm.memh = o.local_region->memh;
    }
    prm.user_data = op;
    prm.cb.send = [](void *request, ucs_status_t st, void *user_data) {
        ucp_request_free(request);
        auto *op = static_cast<Op *>(user_data);
        op->owner->complete(op->id, st);
        delete op;
    };
    ucs_status_ptr_t req = ucp_get_nbx(ep, o.local, o.header.length, o.header.remote, rkey, &prm);
    if (UCS_PTR_IS_PTR(req)) return;  // completes later: prm.cb.send
    delete op;
    complete(o.id, UCS_PTR_STATUS(req));
}

// The holder answers on the endpoint the request came on (REPLY), or, for a
// waiting read it cannot answer at once, on one of its own to this worker's
// address (sent along).
void UcxWorker::post_request(Outgoing &o, ucp_ep_h ep) {
    struct Op {
        UcxWorker *owner;
        uint64_t id;
        WaitingReadHeader header;
        std::vector<uint8_t> payload;
    };
    auto *op = new Op{this, o.id, WaitingReadHeader{o.header, 0, 0, 0, 0, 0}, std::move(o.rkey)};
    unsigned am_id = kReadRequest;
    size_t header_bytes = sizeof(ReadRequestHeader);
    if (o.wait) {
        am_id = kWaitingRead;
        header_bytes = sizeof(WaitingReadHeader);
        op->header = WaitingReadHeader{o.header, o.wait->level_at, o.wait->gen_at, o.wait->generation, o.wait->need,
                                       static_cast<uint32_t>(op->payload.size())};
        // Where to answer it later; a guarded read is answered now or refused.
        if (o.wait->park) op->payload.insert(op->payload.end(), own_address().begin(), own_address().end());
    }
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    prm.flags = UCP_AM_SEND_FLAG_EAGER | UCP_AM_SEND_FLAG_REPLY;
    prm.user_data = op;
    prm.cb.send = [](void *request, ucs_status_t st, void *user_data) {
        ucp_request_free(request);
        auto *op = static_cast<Op *>(user_data);
        if (st != UCS_OK) op->owner->complete(op->id, st);  // not sent: nobody will answer it
        delete op;
    };
    // The header's leading bytes are a plain request's (WaitingReadHeader
    // starts with one).
    ucs_status_ptr_t req =
        ucp_am_send_nbx(ep, am_id, &op->header, header_bytes, op->payload.data(), op->payload.size(), &prm);
    if (UCS_PTR_IS_PTR(req)) return;  // sent (or failed) later: prm.cb.send
    ucs_status_t st = UCS_PTR_STATUS(req);
    delete op;
    if (st != UCS_OK) complete(o.id, st);
}

ucs_status_t UcxWorker::on_read_reply(void *arg, const void *header, size_t header_length, void *data, size_t length,
                                      const ucp_am_recv_param_t *param) {
    auto *self = static_cast<UcxWorker *>(arg);
    ReadReplyHeader h{};
    if (header_length != sizeof h) return UCS_OK;  // not an answer of ours
    std::memcpy(&h, header, sizeof h);
    ucs_status_t st = static_cast<ucs_status_t>(h.status);
    // Answers are sent eagerly; a rendezvous would need a receive posted.
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {
        ucp_am_data_release(self->main_.worker.load(), data);
        st = UCS_ERR_UNSUPPORTED;
    }
    if (PendingRead *g = self->place_answer(h.id, h.offset, data, length, &st)) finish(g, st);
    return UCS_OK;
}

// Copies one answer into its read, under pending_mu_: a read failed by
// another thread meanwhile (its peer closed, the process restarted) is
// finished only after the copy, so that its buffer is never written once its
// owner was told. Returns the read when it is over (all bytes in, or *st an
// error), taken out of pending_; nullptr while pieces are missing or when
// nobody waits for it (answered after it was given up).
UcxWorker::PendingRead *UcxWorker::place_answer(uint64_t id, uint64_t offset, const void *data, uint64_t length,
                                                ucs_status_t *st) {
    std::lock_guard lk(pending_mu_);
    auto it = pending_.find(id);
    if (it == pending_.end()) return nullptr;
    PendingRead *g = it->second;
    if (*st == UCS_OK && (offset > g->length || length > g->length - offset || (length == 0 && g->length > 0)))
        *st = UCS_ERR_MESSAGE_TRUNCATED;
    if (*st == UCS_OK && length > 0) {
        try {
            copy_from_host(static_cast<uint8_t *>(g->local) + offset, data, length, g->kind);
            g->received += length;
        } catch (const std::exception &e) {
            TH_LOG(Error, "cannot place ", length, " bytes read: ", e.what());
            *st = UCS_ERR_IO_ERROR;
        }
    }
    if (*st == UCS_OK && g->received < g->length) return nullptr;
    pending_.erase(it);
    return g;
}

}  // namespace th
