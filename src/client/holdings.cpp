#include "client/holdings.hpp"

#include <algorithm>
#include <optional>
#include <thread>

#include "client/checksum.hpp"
#include "common/error.hpp"
#include "common/faults.hpp"
#include "common/log.hpp"
#include "common/thread_name.hpp"
#include "common/trace.hpp"
#include "transport/memory_kind.hpp"
#include "wire/replica_desc.hpp"

namespace th {

using namespace wire;

namespace {

// An owned copy is made in pieces this large: a release stops a copy made
// ahead within a few ms.
constexpr uint64_t kCopyPiece = 8 << 20;

// Copies the replica's buffers one after the other into host memory at
// `into`, until done or *stop (if given) is set; returns them as they lie there.
std::vector<Buffer> copy_buffers(uint8_t *into, const std::vector<Buffer> &from, const std::atomic<bool> *stop) {
    std::vector<Buffer> out;
    uint64_t offset = 0;
    for (const Buffer &b : from) {
        Buffer nb = b;
        nb.data = into + offset;
        nb.kind = TH_MEM_HOST;
        for (uint64_t at = 0; at < b.spec.nbytes && !(stop && stop->load()); at += kCopyPiece)
            copy_to_host(static_cast<uint8_t *>(nb.data) + at, static_cast<const uint8_t *>(b.data) + at,
                         std::min(kCopyPiece, b.spec.nbytes - at), b.kind);
        offset += b.spec.nbytes;
        out.push_back(nb);
    }
    return out;
}

uint64_t thread_cpu_us() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return uint64_t(ts.tv_sec) * 1000000 + uint64_t(ts.tv_nsec) / 1000;
}

}  // namespace

Holdings::Holdings(const ClientConfig &cfg, uint64_t worker_id, ServerSession &session, UcxWorker &ucx,
                   ControlPage &page)
    : cfg_(cfg), worker_id_(worker_id), session_(session), ucx_(ucx), page_(page), pool_(ucx, cfg.spill_pool_bytes) {}

Holdings::~Holdings() {
    std::vector<uint64_t> ahead;
    {
        std::lock_guard lk(ahead_mu_);
        for (const auto &[id, a] : ahead_) ahead.push_back(id);
    }
    for (uint64_t id : ahead) drop_ahead(id);
    std::lock_guard lk(mu_);
    owned_.clear();
}

uint64_t Holdings::new_id() {
    uint64_t id = next_replica_++ ^ (worker_id_ << 20);
    return id == 0 ? 1 : id;
}

std::unique_ptr<Replica> Holdings::prepare(const std::string &model, uint32_t shard, std::vector<Buffer> buffers) {
    return std::make_unique<Replica>(*this, new_id(), model, shard, std::move(buffers), ucx_, page_);
}

void Holdings::abandon(std::unique_ptr<Replica> replica) {
    let_go(*replica);
    replica.reset();
}

void Holdings::let_go(Replica &r) {
    r.end_generation();  // readers still on it see the change; its answers finish first
    page_.release(r.control_word());
}

void Holdings::remember(Replica *r) {
    std::lock_guard lk(mu_);
    held_[r->id()] = r;
}

void Holdings::drop_unreleased(Replica &r) {
    {
        std::lock_guard lk(mu_);
        auto it = held_.find(r.id());
        if (it == held_.end() || it->second != &r) return;
    }
    TH_LOG(Warn, "replica ", r.id(), " of '", r.model(), "' version ", r.version(),
           " was destroyed without being released: withdrawn here only");
    forget(r);
}

void Holdings::forget(Replica &r) {
    drop_ahead(r.id());
    {
        std::lock_guard lk(mu_);
        held_.erase(r.id());
    }
    let_go(r);
}

void Holdings::declare(Replica &r, const Deadline &deadline, bool recover, bool again) {
    std::vector<TensorSpec> specs = r.specs();
    Bytes reply = session_.call(
        [&](Builder &b, const Header &h) {
            auto body = CreatePublish(b, b.CreateString(r.model()), r.version(), r.shard(), r.num_shards(),
                                      r.chunk_bytes(), put_tensors(b, specs), put_desc(b, r.desc()), r.id(), r.owned(),
                                      r.checksums().empty() ? 0 : b.CreateVector(r.checksums()), again,
                                      again && r.committed());
            return finish(b, h, body);
        },
        deadline, recover);
    const Envelope *env = GetEnvelope(reply.data());
    if (env->body_type() != Body::PublishReply) fail(TH_ERR_PROTOCOL, "unexpected reply to Publish");
    if (env->body_as_PublishReply()->committed()) r.mark_committed();
}

std::unique_ptr<Replica> Holdings::publish(const std::string &model, uint64_t version, uint32_t shard,
                                           uint32_t num_shards, uint64_t chunk_bytes, std::vector<Buffer> buffers,
                                           SyncStats *stats, bool checksums) {
    auto started = Clock::now();
    if (model.empty() || model.size() > 255) fail(TH_ERR_INVALID_ARG, "model name must be 1..255 bytes");
    if (num_shards == 0 || shard >= num_shards)
        fail(TH_ERR_INVALID_ARG, "shard ", shard, " is out of range for ", num_shards, " shards");
    std::vector<TensorSpec> specs;
    for (const Buffer &b : buffers) {
        if (b.data == nullptr) fail(TH_ERR_INVALID_ARG, "tensor '", b.spec.name, "' has a null data pointer");
        specs.push_back(b.spec);
    }
    Layout layout(specs, chunk_bytes);  // validates names, sizes, chunk size
    std::unique_ptr<Replica> r = prepare(model, shard, std::move(buffers));
    r->set_version(version, num_shards, chunk_bytes);
    if (checksums) r->set_checksums(th::checksums(r->chunk_pieces()));
    r->control_word()->chunks_done.store(layout.num_chunks());
    r->mark_complete();
    const auto declared = Clock::now();
    try {
        declare(*r, Deadline(cfg_.timeout_ms));
    } catch (...) {
        abandon(std::move(r));
        throw;
    }
    const double server_seconds = seconds_since(declared);
    // The last shard's publish commits the version: the other shards held
    // here learn it too.
    if (r->committed()) {
        std::lock_guard lk(mu_);
        for (auto &[id, other] : held_)
            if (other->version() == r->version() && other->model() == r->model()) other->mark_committed();
    }
    remember(r.get());
    // Memory for the owned copy a mutation of it may need, made ready now,
    // on the pool's thread, rather than when the trainer waits for it.
    if (cfg_.retention != TH_RETAIN_FAIL) {
        pool_.prepare(layout.total_bytes());
        if (cfg_.spill_ahead) start_ahead(*r, layout.total_bytes());
    }
    SyncStats st;
    st.server_seconds = server_seconds;
    st.version = version;
    st.moved = false;
    st.bytes = layout.total_bytes();
    st.chunks = layout.num_chunks();
    st.seconds = seconds_since(started);
    TH_LOG(Info, "published '", model, "' v", version, " shard ", shard, "/", num_shards, ": ", st.bytes, " bytes, ",
           st.chunks, " chunks in ", st.seconds, " s");
    if (stats) *stats = st;
    return r;
}

void Holdings::release(Replica &r, bool retain) {
    std::optional<Error> retention_failed;
    if (retain && !r.mutating() && !r.withdrawn() && r.complete()) {
        try {
            prepare_to_give_up(r, Deadline(cfg_.timeout_ms));
        } catch (const Error &e) {
            if (e.code() == TH_ERR_RETAINED) throw;  // refused: nothing changed, still served
            // Not listed by the server (it refused the version when this
            // worker registered again, or lost this worker's lease): no
            // reader is routed here and nothing requires it from us.
            // Otherwise the server could not be asked (it is gone or slow):
            // the caller gives the buffers up all the same, so withdraw
            // locally, and report.
            if (e.code() != TH_ERR_NOT_FOUND) retention_failed = e;
        }
    }
    forget(r);
    // A deadline of its own: a spill before it may have taken any time.
    try {
        session_.call([&](Builder &b, const Header &h) { return finish(b, h, CreateRelease(b, r.id())); },
                      Deadline(cfg_.timeout_ms));
    } catch (const Error &e) {
        // The server had forgotten it already (it lost this worker's lease,
        // or refused the replica when this worker registered again): what
        // release asks for is done.
        if (e.code() != TH_ERR_NOT_FOUND) throw;
        TH_LOG(Info, "replica ", r.id(), " was no longer listed by the server: ", e.what());
    }
    if (retention_failed) throw *retention_failed;
}

void Holdings::withdraw_all() {
    std::vector<Replica *> held;
    {
        std::lock_guard lk(mu_);
        for (auto &[id, r] : held_) held.push_back(r);
    }
    // One server that does not answer is enough: the others are withdrawn
    // locally (their control words say so to readers still on them), and
    // the server forgets them with this worker's lease.
    bool server_answers = true;
    for (Replica *r : held) {
        try {
            if (server_answers) {
                release(*r, /*retain=*/false);  // the process is going away: nothing to spill into
            } else {
                forget(*r);
            }
        } catch (const Error &e) {
            TH_LOG(Info, "releasing replica ", r->id(), " at shutdown: ", e.what());
            server_answers = e.code() != TH_ERR_UNAVAILABLE && e.code() != TH_ERR_TIMEOUT && e.code() != TH_ERR_CLOSED;
        } catch (const std::exception &e) {
            TH_LOG(Info, "releasing replica ", r->id(), " at shutdown: ", e.what());
        }
        r->detach();
    }
}

uint32_t Holdings::prepare_to_give_up(Replica &r, const Deadline &deadline) {
    // However it ends, a copy made ahead of r is no longer wanted: a spill
    // took it, or r was not the last copy, or it stays served as it is.
    struct DropAhead {
        Holdings &h;
        uint64_t id;
        ~DropAhead() { h.drop_ahead(id); }
    } drop{*this, r.id()};
    Deadline calls = deadline;
    auto ask = [&](Body kind) {
        trace::event("mutation_ask", static_cast<uint64_t>(kind));
        Bytes reply = session_.call(
            [&](Builder &b, const Header &h) {
                return kind == Body::BeginMutation ? finish(b, h, CreateBeginMutation(b, r.id()))
                                                   : finish(b, h, CreateCancelMutation(b, r.id()));
            },
            calls);
        return reply;
    };
    // A replica the server no longer lists (it forgot this worker's replicas
    // and refused this one when the worker declared it again, its version
    // being gone) has nobody routed to it: it may change at once. (While a
    // re-registration of this worker declares its replicas, none is listed:
    // the session asks again after the declarations, and that answer stands.)
    Bytes reply;
    auto listed = [&] {
        try {
            reply = ask(Body::BeginMutation);
            return true;
        } catch (const Error &e) {
            if (e.code() != TH_ERR_NOT_FOUND) throw;
            TH_LOG(Info, "replica ", r.id(), " is not listed by the server (", e.what(), "): nobody is routed to it");
            return false;
        }
    };
    if (!listed()) return 0;
    auto state = [&] { return GetEnvelope(reply.data())->body_as_BeginMutationReply(); };
    if (state() == nullptr) fail(TH_ERR_PROTOCOL, "unexpected reply to BeginMutation");
    if (state()->last_copy()) {
        std::string what = str("replica of model '", r.model(), "' version ", r.version(), " shard ", r.shard(),
                               " is the last complete copy of a required version");
        if (cfg_.retention == TH_RETAIN_FAIL) {
            ask(Body::CancelMutation);
            fail(TH_ERR_RETAINED, what, " (retention policy: fail)");
        }
        // wait: give a filling replica the chance to complete first.
        Deadline wait = deadline.capped(cfg_.mutation_wait_ms);
        while (cfg_.retention == TH_RETAIN_WAIT && state()->last_copy() && state()->filling() > 0 && !wait.expired()) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
            if (!listed()) return 0;
        }
        if (state()->last_copy()) {
            TH_LOG(Info, what, ": keeping an owned copy");
            // The server kept routing readers here while the copy was made;
            // asking again finds the copy and stops that.
            try {
                spill(r);
            } catch (const Error &e) {
                // The server forgot the version meanwhile (this worker
                // registered again, its replicas were forgotten until
                // declared again, and nobody else held it): nobody can fetch
                // it any more, so it needs no copy.
                if (e.code() != TH_ERR_CONFLICT) throw;
                TH_LOG(Info, what, ", but the server no longer lists that version (", e.what(), "): no copy kept");
            } catch (...) {
                // Nothing changed: it keeps serving. The spill's error is
                // what the caller needs to hear, not this call's.
                calls = Deadline(cfg_.timeout_ms);
                try {
                    ask(Body::CancelMutation);
                } catch (const std::exception &e) {
                    TH_LOG(Warn, "replica ", r.id(), " may stay unrouted: ", e.what());
                }
                throw;
            }
            // The copy is local work as long as the shard is large (seconds
            // for GBs); the server is owed an answer within a deadline of its own.
            calls = Deadline(cfg_.timeout_ms);
            if (!listed()) return 0;
            if (state() == nullptr) fail(TH_ERR_PROTOCOL, "unexpected reply to BeginMutation");
        }
    }
    return state()->active_reads();
}

void Holdings::begin_mutation(Replica &r) {
    if (r.mutating()) fail(TH_ERR_INVALID_ARG, "begin_mutation was already called on this replica");
    if (r.withdrawn()) {  // served by nobody: its generation is odd already
        r.mark_mutating();
        return;
    }
    trace::event("mutation", r.id());
    uint32_t active = prepare_to_give_up(r, Deadline(cfg_.timeout_ms + cfg_.mutation_wait_ms));
    // Let the reads already planned onto it finish; past the wait the seqlock
    // still protects them (they re-read elsewhere). The wait starts now: a
    // spill before it may have taken any time.
    Deadline drain(cfg_.mutation_wait_ms);
    Deadline deadline(cfg_.timeout_ms + cfg_.mutation_wait_ms);
    while (active > 0 && !drain.expired()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        Bytes reply = session_.call(
            [&](Builder &b, const Header &h) { return finish(b, h, CreateBeginMutation(b, r.id())); }, deadline);
        active = GetEnvelope(reply.data())->body_as_BeginMutationReply()->active_reads();
    }
    if (active > 0) TH_LOG(Info, "replica ", r.id(), ": ", active, " reads still in flight after ", cfg_.mutation_wait_ms,
                          " ms; they will re-read elsewhere");
    r.end_generation();
    r.mark_mutating();
    trace::event("mutation_done", r.id());
}

Replica::Storage Holdings::slab_for(uint64_t bytes) {
    // Copies of versions no longer required give their memory back: the
    // previous version's copy is usually what the next spill reuses. With a
    // free slab ready (the one prepared at publish) that happens on the
    // heartbeat thread, off the trainer's path: asking and freeing are three
    // calls to the server, each slow when the hosts are busy (0.45 s in all,
    // seen at the start of an update with eight readers on two cores).
    bool have_owned;
    {
        std::lock_guard lk(mu_);
        have_owned = !owned_.empty();
    }
    if (have_owned && pool_.has_free(bytes)) {
        session_.beat_soon();
    } else if (have_owned) {
        try {
            session_.beat();
        } catch (const Error &e) {
            TH_LOG(Info, "could not ask which owned copies may go before spilling: ", e.what());
        }
    }
    return pool_.acquire(bytes);
}

void Holdings::start_ahead(const Replica &r, uint64_t total) {
    auto a = std::make_unique<AheadCopy>();
    AheadCopy *ahead = a.get();
    std::vector<Buffer> from = r.buffers();
    ahead->thread = std::thread([this, ahead, from = std::move(from), total] {
        name_this_thread("th-spill-ahead");
        try {
            ahead->storage = slab_for(total);
            ahead->buffers = copy_buffers(ahead->storage.data(), from, &ahead->stop);
            ahead->done.store(!ahead->stop.load());
        } catch (const std::exception &e) {
            ahead->failed = e.what();
        }
    });
    std::lock_guard lk(ahead_mu_);
    ahead_[r.id()] = std::move(a);
}

std::pair<size_t, size_t> Holdings::copies_ahead() {
    std::lock_guard lk(ahead_mu_);
    size_t done = 0;
    for (const auto &[id, a] : ahead_) done += a->done.load();
    return {ahead_.size(), done};
}

std::unique_ptr<Holdings::AheadCopy> Holdings::remove_ahead(uint64_t replica_id) {
    std::lock_guard lk(ahead_mu_);
    auto it = ahead_.find(replica_id);
    if (it == ahead_.end()) return nullptr;
    std::unique_ptr<AheadCopy> a = std::move(it->second);
    ahead_.erase(it);
    return a;
}

std::unique_ptr<Holdings::AheadCopy> Holdings::take_ahead(uint64_t replica_id) {
    std::unique_ptr<AheadCopy> a = remove_ahead(replica_id);
    if (!a) return nullptr;
    a->thread.join();  // the rest of the copy, if the mutation came early
    if (!a->done) {
        TH_LOG(Info, "replica ", replica_id, ": the copy made ahead failed (", a->failed, "); copying now");
        return nullptr;
    }
    return a;
}

void Holdings::drop_ahead(uint64_t replica_id) {
    std::unique_ptr<AheadCopy> a = remove_ahead(replica_id);
    if (!a) return;
    a->stop.store(true);
    a->thread.join();
}  // its slab goes back to the pool

void Holdings::spill(const Replica &r) {
    auto started = Clock::now();
    uint64_t total = 0;
    for (const Buffer &b : r.buffers()) total += b.spec.nbytes;
    Replica::Storage storage;
    std::vector<Buffer> buffers;
    bool made_ahead = false;
    if (std::unique_ptr<AheadCopy> a = take_ahead(r.id())) {
        storage = std::move(a->storage);
        buffers = std::move(a->buffers);
        made_ahead = true;
    } else {
        trace::event("spill_slab", total);
        storage = slab_for(total);
        trace::event("spill_copy", total, thread_cpu_us());
        buffers = copy_buffers(storage.data(), r.buffers(), nullptr);
    }
    auto copied = Clock::now();
    trace::event("spill_declare", total, thread_cpu_us(), made_ahead);
    if (faults().spill_delay_us) std::this_thread::sleep_for(std::chrono::microseconds(faults().spill_delay_us));
    auto copy = std::make_unique<Replica>(*this, new_id(), r.model(), r.shard(), std::move(buffers), ucx_, page_,
                                          std::move(storage));
    copy->set_version(r.version(), r.num_shards(), r.chunk_bytes());
    copy->set_checksums(r.checksums());
    copy->control_word()->chunks_done.store(Layout(copy->specs(), copy->chunk_bytes()).num_chunks());
    copy->mark_complete();
    if (r.committed()) copy->mark_committed();
    // A copy of a committed version: one a server that has just taken over
    // lists (as committed) even before the version's other holders declared
    // it again.
    declare(*copy, Deadline(cfg_.timeout_ms), /*recover=*/true, /*again=*/copy->committed());
    remember(copy.get());
    // Readers of r read on from the copy once r changes, without a new plan.
    copy->succeed(r);
    TH_LOG(Debug, "spilled replica ", r.id(), " (", total, " bytes) into owned copy ", copy->id(), ": ",
           made_ahead ? "copied ahead, " : "copy ", std::chrono::duration<double>(copied - started).count(), " s, declared ",
           std::chrono::duration<double>(Clock::now() - copied).count(), " s");
    trace::event("spill_done", total);
    std::lock_guard lk(mu_);
    owned_[copy->id()] = std::move(copy);
}

void Holdings::drop_owned(const std::vector<uint64_t> &ids) {
    for (uint64_t id : ids) {
        std::unique_ptr<Replica> r;
        {
            std::lock_guard lk(mu_);
            auto it = owned_.find(id);
            if (it == owned_.end()) continue;
            r = std::move(it->second);
            owned_.erase(it);
        }
        // Freed only once the server routes nobody to it and nobody reads it:
        // a reader planned onto it since the heartbeat may still be reading.
        bool keep = true;
        try {
            Deadline d(cfg_.timeout_ms);
            Bytes reply = session_.call(
                [&](Builder &b, const Header &h) { return finish(b, h, CreateBeginMutation(b, r->id())); }, d);
            const BeginMutationReply *state = GetEnvelope(reply.data())->body_as_BeginMutationReply();
            keep = state == nullptr || state->active_reads() > 0 || state->last_copy();
            if (keep)
                session_.call(
                    [&](Builder &b, const Header &h) { return finish(b, h, CreateCancelMutation(b, r->id())); }, d);
        } catch (const std::exception &e) {
            TH_LOG(Info, "keeping the owned copy ", id, " for now: ", e.what());
        }
        if (keep) {
            std::lock_guard lk(mu_);
            owned_[id] = std::move(r);  // asked again at a later heartbeat
            continue;
        }
        TH_LOG(Info, "freeing the owned copy of '", r->model(), "' version ", r->version(), " shard ", r->shard(),
               ": no longer required");
        r->mark_mutating();
        try {
            release(*r, /*retain=*/false);  // withdrawn locally even if the server is not told
        } catch (const std::exception &e) {
            TH_LOG(Warn, "releasing an owned copy: ", e.what());
        }
        r.reset();  // its memory goes back to the spill pool
    }
}

namespace {

// The chunks among `chunks` whose bytes here no longer match their
// checksums; nullopt when r cannot be checked now (still filling, being
// mutated, no checksums): the server asks again at the next heartbeat.
std::optional<std::vector<uint32_t>> changed_chunks(const Replica &r, const std::vector<uint32_t> &chunks) {
    if (!r.complete() || r.mutating() || r.checksums().empty()) return std::nullopt;
    uint64_t gen = r.control_word()->generation.load(std::memory_order_acquire);
    if (gen % 2 != 0) return std::nullopt;
    std::vector<uint64_t> sums;
    try {
        sums = th::checksums(r.chunk_pieces(chunks));
    } catch (const Error &e) {
        TH_LOG(Warn, "cannot check the chunks readers reported of replica ", r.id(), ": ", e.what());
        return std::nullopt;
    }
    // begin_mutation turns the generation odd before the bytes change.
    if (r.control_word()->generation.load(std::memory_order_acquire) != gen) return std::nullopt;
    std::vector<uint32_t> changed;
    for (size_t i = 0; i < chunks.size(); ++i)
        if (sums[i] != r.checksums()[chunks[i]]) changed.push_back(chunks[i]);
    return changed;
}

}  // namespace

// A reader found chunks of this replica not matching their checksums. Either
// its bytes here changed (the buffers were written without begin-mutation,
// or memory went bad) or they were damaged on the way. Hashing our own copy
// tells which: intact, and the server routes to it again; otherwise it is
// withdrawn for good. Under mu_, so that it is not released meanwhile. A
// withdrawn replica stays held (not declared again) until its handle is
// released, so that the client's shutdown still detaches it; an owned copy
// has no handle and goes at once.
void Holdings::check_reported(uint64_t id, std::vector<uint32_t> chunks) {
    std::unique_ptr<Replica> owned;
    std::vector<uint32_t> bad;
    {
        std::lock_guard lk(mu_);
        auto it = held_.find(id);
        if (it == held_.end()) return;
        Replica &r = *it->second;
        // Bounded work per heartbeat (the lock is held, the heartbeat waits):
        // the server asks again for the chunks not answered for.
        size_t most = std::max<uint64_t>(1, cfg_.check_bytes_per_beat / std::max<uint64_t>(1, r.chunk_bytes()));
        if (chunks.size() > most) chunks.resize(most);
        if (r.withdrawn()) {
            bad = chunks;  // withdrawn before: the server did not get our answer
        } else {
            std::optional<std::vector<uint32_t>> changed = changed_chunks(r, chunks);
            if (!changed) return;
            bad = std::move(*changed);
            if (bad.empty()) {
                TH_LOG(Info, "replica ", id, " of '", r.model(), "' version ", r.version(), " shard ", r.shard(),
                       ": the ", chunks.size(), " chunk(s) a reader reported match their checksums here");
            } else {
                TH_LOG(Error, "replica ", id, " of '", r.model(), "' version ", r.version(), " shard ", r.shard(),
                       ": chunk ", bad.front(), " (", bad.size(), " of ", chunks.size(),
                       " reported) no longer matches the checksum the version was published with; its buffers "
                       "changed without begin_mutation, or its memory is damaged. It is withdrawn: no reader is "
                       "routed to it again, and these bytes are not that version");
                r.distrust_generation();  // readers still on it drop it, and what they got from it
                r.mark_withdrawn();
                if (auto o = owned_.find(id); o != owned_.end()) {
                    owned = std::move(o->second);
                    owned_.erase(o);
                    held_.erase(it);
                }
            }
        }
    }
    if (owned) let_go(*owned);
    owned.reset();  // an owned copy's memory goes back to the spill pool
    try {
        session_.call(
            [&](Builder &b, const Header &h) {
                return finish(b, h, CreateChunksChecked(b, id, b.CreateVector(chunks), bad.empty()));
            },
            Deadline(cfg_.timeout_ms));
    } catch (const std::exception &e) {
        TH_LOG(Warn, "could not tell the server what checking replica ", id, " found: ", e.what());
    }
}

// Under mu_ throughout: no replica is released or becomes held half-way
// through, and re-registrations do not overlap.
void Holdings::register_again(const std::function<bool()> &hello, const Deadline &deadline) {
    std::lock_guard lk(mu_);
    if (!hello()) return;
    if (faults().redeclare_delay_us) std::this_thread::sleep_for(std::chrono::microseconds(faults().redeclare_delay_us));
    // Without recovery: a failure here surfaces to the call that asked for
    // re-registration, which decides whether to try the next server.
    for (auto &[id, r] : held_) {
        if (!r->complete() || r->mutating() || r->withdrawn()) continue;
        try {
            declare(*r, deadline, /*recover=*/false, /*again=*/true);
        } catch (const Error &e) {
            // The server moved past this version while it did not know us
            // and has forgotten it (nobody else held it): it is no longer a
            // version anyone can fetch. The others must still be declared.
            if (e.code() != TH_ERR_CONFLICT) throw;
            TH_LOG(Info, "not declaring '", r->model(), "' version ", r->version(), " shard ", r->shard(),
                   " again: ", e.what());
        }
    }
}

}  // namespace th
