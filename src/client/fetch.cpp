#include "client/fetch.hpp"

#include <algorithm>
#include <future>
#include <optional>
#include <thread>

#include "common/error.hpp"
#include "common/faults.hpp"
#include "common/log.hpp"
#include "common/stripes.hpp"
#include "common/thread_name.hpp"
#include "common/trace.hpp"
#include "wire/replica_desc.hpp"

namespace th {

using namespace wire;

Fetch::Fetch(ServerSession &session, Holdings &holdings, UcxWorker &ucx, const FetchRequest &req,
             std::vector<Buffer> dst, bool serve)
    : session_(session), ucx_(ucx), cfg_(session.config()), req_(req), target_(req, std::move(dst)), serve_(serve) {
    if (req_.model.empty()) fail(TH_ERR_INVALID_ARG, "model name is empty");
    if (target_.partial() && serve_) fail(TH_ERR_INVALID_ARG, "only whole-shard fetches can serve others");
    if (req_.verify != TH_VERIFY_OFF && req_.verify != TH_VERIFY_SAMPLE && req_.verify != TH_VERIFY_ALL)
        fail(TH_ERR_INVALID_ARG, "unknown verify mode ", static_cast<int>(req_.verify));
    verify_ = VerifyPolicy(req_.verify);
    const std::vector<Buffer> &buffers = target_.buffers();
    std::vector<RegionRef> regions;
    if (serve_) {
        serving_ = std::make_unique<ServingReplica>(holdings, session_, req_.model, req_.shard, buffers);
        for (size_t i = 0; i < buffers.size(); ++i) regions.push_back(serving_->replica().buffer_region(i));
    } else {
        for (const Buffer &b : buffers) regions.push_back(ucx_.register_memory(b.data, b.spec.nbytes, b.kind));
    }
    target_.set_regions(std::move(regions));
}

Fetch::~Fetch() {
    if (!finished_) {
        try {
            drain();
            finish(false);
        } catch (...) {
        }
    }
}

void Fetch::fail_fetch(th_status code, const std::string &why) {
    std::string what = str("fetch of model '", req_.model, "' ",
                           have_layout_ ? str("version ", version_) : std::string("(version not resolved)"), " shard ",
                           req_.shard, ": ", why);
    throw Error(code, what);
}

// The caller's th_cancel, looked at between transfers as the deadline is.
void Fetch::check_canceled() {
    if (!canceled(req_.cancel)) return;
    fail_fetch(TH_ERR_CANCELED, needed_ == 0 ? std::string("canceled before its first read")
                                              : str("canceled with ", confirmed_, " of ", needed_, " chunks fetched"));
}

void Fetch::apply_layout(uint64_t version, uint64_t chunk_bytes, uint32_t num_shards, std::vector<TensorSpec> tensors) {
    Layout layout(std::move(tensors), chunk_bytes);
    version_ = version;
    have_layout_ = true;
    try {
        target_.apply(std::move(layout));
    } catch (const Error &e) {
        fail_fetch(e.code(), e.what());
    }
    first_chunk_ = target_.first_chunk();
    end_chunk_ = target_.end_chunk();
    // Chunks a ranged fetch does not touch start out as done: never planned or read.
    state_.assign(end_chunk_ - first_chunk_, Confirmed);
    waited_.assign(state_.size(), false);
    for (uint32_t c = first_chunk_; c < end_chunk_; ++c)
        if (target_.needed(c)) state_[c - first_chunk_] = Missing;
    needed_ = target_.needed_count();
    sums_.reset(state_.size());
    // Re-registration declares it with the version's own shard count.
    if (serving_) serving_->set_version(version_, num_shards, chunk_bytes);
}

void Fetch::plan(const Deadline &deadline) {
    uint32_t lo = 0, count = 0;  // first plan: the whole shard (layout unknown yet)
    if (have_layout_) {
        uint32_t hi = first_chunk_;
        lo = end_chunk_;
        for (uint32_t c = first_chunk_; c < end_chunk_; ++c)
            if (state_[c - first_chunk_] != Confirmed) {
                lo = std::min(lo, c);
                hi = c + 1;
            }
        count = hi - lo;
    }
    // Only a fetch that serves, and only its first plan, may be striped: the
    // server gives it a stripe to relay.
    ask(deadline, lo, count, !have_layout_ && serve_ ? PlanMode::Striped : PlanMode::Single, true);
}

std::vector<std::pair<uint32_t, uint32_t>> Fetch::uncovered() const {
    std::vector<uint8_t> covered(end_chunk_ - first_chunk_, 0);
    for (const Planning &p : planning_)
        for (uint32_t c = std::max(p.call->lo, first_chunk_); c < std::min(p.call->lo + p.call->count, end_chunk_); ++c)
            covered[c - first_chunk_] = 1;
    for (const auto &sp : sources_)
        if (!sp->failed)
            for (uint32_t c = std::max(sp->next, first_chunk_); c < std::min(sp->end, end_chunk_); ++c)
                covered[c - first_chunk_] = 1;
    std::vector<std::pair<uint32_t, uint32_t>> runs;
    for (uint32_t c = first_chunk_; c < end_chunk_; ++c) {
        if (state_[c - first_chunk_] != Missing || covered[c - first_chunk_]) continue;
        if (!runs.empty() && runs.back().first + runs.back().second == c)
            runs.back().second++;
        else
            runs.push_back({c, 1});
    }
    return runs;
}

// Off the fetch's thread: the call and the connections to new sources take
// long on a busy host (0.9 s seen with seven new sources on two cores), and
// meanwhile the sources already planned are read.
void Fetch::plan_uncovered(const Deadline &deadline) {
    bool replan = source_lost_;
    replan_due_ = source_lost_ = false;
    for (auto [lo, count] : uncovered()) ask_later(deadline, lo, count, replan);
}

Fetch::PlanCall Fetch::plan_call(uint32_t lo, uint32_t count, PlanMode mode, bool replan) const {
    PlanCall c;
    c.model = req_.model;
    c.version = have_layout_ ? version_ : req_.version;
    c.shard = req_.shard;
    c.lo = lo;
    c.count = count;
    c.mode = mode;
    c.replan = replan;
    if (serving_) {
        c.desc = serving_->replica().desc();
        c.replica_id = serving_->replica().id();
    }
    c.exclude = exclude_;
    c.exclude_replicas = exclude_replicas_;
    if (!target_.partial())
        for (const Buffer &b : target_.buffers()) c.given.push_back(b.spec);
    c.partial = target_.partial();
    return c;
}

// Touches nothing of the fetch but the call: it may run on another thread.
void Fetch::call_plan(ServerSession &session, UcxWorker &ucx, PlanCall &c, const Deadline &deadline) {
    const auto asked = Clock::now();
    for (;;) {
        try {
            c.reply = session.call(
                [&](Builder &b, const Header &h) {
                    auto model = b.CreateString(c.model);
                    flatbuffers::Offset<wire::ReplicaDesc> desc;
                    if (c.desc) desc = put_desc(b, *c.desc);
                    auto ex = b.CreateVector(c.exclude);
                    auto ex_replicas = b.CreateVector(c.exclude_replicas);
                    flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::TensorSpec>>> specs;
                    if (!c.partial) specs = put_tensors(b, c.given);
                    auto body = CreatePlanFetch(b, model, c.version, c.shard, c.lo, c.count, desc, c.replica_id, ex, specs,
                                                ex_replicas, c.mode);
                    return wire::finish(b, h, body);
                },
                deadline);
            break;
        } catch (const Error &e) {
            // Right after a failover the new server may not know the version
            // yet; the holders are re-declaring it. Wait for them, within the
            // deadline, rather than report a version that exists as missing.
            bool maybe_back_soon = e.code() == TH_ERR_NOT_FOUND || e.code() == TH_ERR_NOT_COMMITTED ||
                                   e.code() == TH_ERR_UNAVAILABLE;
            if (!maybe_back_soon || !session.rebuilding() || deadline.remaining_ms() < 100) {
                TH_LOG(Info, "plan failed: ", e.what(), maybe_back_soon && !session.rebuilding() ? " (not rebuilding)" : "");
                throw;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
    }
    c.server_seconds = seconds_since(asked);
    const Envelope *env = GetEnvelope(c.reply.data());
    if (env->body_type() != Body::PlanReply) fail(TH_ERR_PROTOCOL, "unexpected reply to PlanFetch");
    const PlanReply *p = env->body_as_PlanReply();
    if (p->ranges() == nullptr || p->ranges()->size() == 0) fail(TH_ERR_PROTOCOL, "plan without sources");
    // Connected to all at once: a striped plan names up to one source per
    // stripe, and new ones are greeted together.
    std::vector<UcxWorker::PeerAddress> wanted;
    for (const SourceRange *r : *p->ranges()) {
        if (r->ucx_address() == nullptr) fail(TH_ERR_PROTOCOL, "plan without UCX address");
        wanted.emplace_back(r->worker_id(), std::vector<uint8_t>(r->ucx_address()->begin(), r->ucx_address()->end()));
    }
    c.peers = ucx.peers(wanted);
}

void Fetch::ask(const Deadline &deadline, uint32_t lo, uint32_t count, PlanMode mode, bool replan) {
    trace::event("plan_ask", lo, count, static_cast<uint64_t>(mode));
    PlanCall c = plan_call(lo, count, mode, replan);
    call_plan(session_, ucx_, c, deadline);
    server_seconds_ += c.server_seconds;
    apply_plan(c);
}

void Fetch::ask_later(const Deadline &deadline, uint32_t lo, uint32_t count, bool replan) {
    trace::event("plan_ask", lo, count, static_cast<uint64_t>(PlanMode::StripedNow));
    auto c = std::make_shared<PlanCall>(plan_call(lo, count, PlanMode::StripedNow, replan));
    ServerSession *session = &session_;
    UcxWorker *ucx = &ucx_;
    std::shared_ptr<Mailbox> box = mailbox_;
    planning_.push_back({c, std::async(std::launch::async, [session, ucx, c, deadline, box] {
                             name_this_thread("th-plan");
                             try {
                                 call_plan(*session, *ucx, *c, deadline);
                             } catch (...) {
                                 box->wake();
                                 throw;
                             }
                             box->wake();
                         })});
}

void Fetch::apply_plan(PlanCall &c) {
    trace::event("plan_reply", c.lo, c.count);
    const PlanReply *p = GetEnvelope(c.reply.data())->body_as_PlanReply();
    if (!have_layout_) {
        if (p->num_shards() == 0 || req_.shard >= p->num_shards()) fail(TH_ERR_PROTOCOL, "plan with a bad shard count");
        apply_layout(p->version(), p->chunk_bytes(), p->num_shards(), get_tensors(p->tensors()));
        // The first plan asks for every chunk: its checksums cover the shard.
        if (const auto *sums = aligned(p->checksums(), "checksum list"); sums && sums->size() > 0) {
            if (sums->size() != target_.layout().num_chunks()) fail(TH_ERR_PROTOCOL, "plan with a bad checksum count");
            checksums_.assign(sums->begin(), sums->end());
            if (serving_) serving_->set_checksums(checksums_);
        }
        // Planned per stripe: the replica tells its followers how far each
        // stripe has filled, for the count the server plans with.
        uint32_t k = p->stripes();
        if (serving_ && c.mode == PlanMode::Striped && k > 1 && k <= kMaxStripes && k <= target_.layout().num_chunks()) {
            striped_ = true;
            stripes_ = k;
            stripe_served_.assign(k, 0);
            serving_->set_stripes(k);
        }
    }
    else if (p->version() != version_) fail(TH_ERR_PROTOCOL, "server planned another version");
    if (c.replan) plans_++;
    if (serving_) serving_->start_reporting();
    size_t next_peer = 0;
    for (const SourceRange *r : *p->ranges()) {
        auto s = std::make_unique<FetchSource>();
        s->worker = r->worker_id();
        s->replica = r->replica_id();
        publisher_[s->replica] = r->publisher();
        s->desc = get_desc(r->replica());
        check_desc(s->desc, target_.layout().tensors());
        s->complete = r->complete();
        s->num_chunks = target_.layout().num_chunks();
        uint32_t first = std::max(r->first_chunk(), first_chunk_);
        s->end = std::min(r->first_chunk() + r->num_chunks(), end_chunk_);
        s->next = first;
        if (s->complete) s->avail = s->end;  // its word would say so too
        if (striped_ && first < s->end) {
            uint32_t n = target_.layout().num_chunks();
            if (uint32_t i = stripe_of(n, stripes_, first); i == stripe_of(n, stripes_, s->end - 1)) s->stripe = i;
        }
        UcxWorker::PeerOrError &peer = c.peers[next_peer++];
        s->peer = std::move(peer.peer);
        if (!s->peer) fail_source(*s, peer.error);
        bool asked = s->peer && s->peer->path() == ReadPath::ActiveMessage;  // its holder answers
        s->waits_ok = !s->complete && s->desc.answers_waiting_reads && asked;
        s->guarded = s->desc.guards_reads && asked;
        s->window = ReadWindow(cfg_.max_inflight, ReadWindow::target_for(r->complete(), r->publisher(), s->guarded));
        trace::event("plan", s->worker, first, s->end, s->complete);
        TH_LOG(Debug, "fetch '", req_.model, "' v", version_, " shard ", req_.shard, ": chunks [", first, ", ", s->end,
               ") from worker ", s->worker, s->complete ? "" : " (filling)");
        sources_.push_back(std::move(s));
    }
    // Stripes left out wait for their relays, briefly.
    if (c.mode == PlanMode::Striped && striped_ && !uncovered().empty()) {
        replan_due_ = true;
        replan_at_ = Clock::now() + kStripeWait;
    }
    if (faults().plan_delay_us) std::this_thread::sleep_for(std::chrono::microseconds(faults().plan_delay_us));
}

// Plans asked for off the fetch's thread that have come back.
void Fetch::take_plans() {
    for (auto it = planning_.begin(); it != planning_.end();) {
        if (it->done.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
            ++it;
            continue;
        }
        Planning p = std::move(*it);
        it = planning_.erase(it);
        p.done.get();  // its error, if it failed
        apply_plan(*p.call);
    }
}

void Fetch::issue_chunks(FetchSource &s, uint32_t first, uint32_t count, bool wait) {
    if (faults().chunk_delay_us)
        std::this_thread::sleep_for(std::chrono::microseconds(uint64_t{faults().chunk_delay_us} * count));
    // Consecutive chunks of one tensor are one piece: contiguous here and at
    // the source.
    std::vector<Piece> ps;
    for (uint32_t c = first; c < first + count; ++c) {
        for (const Piece &p : target_.pieces(c)) {
            Piece *last = ps.empty() ? nullptr : &ps.back();
            if (last != nullptr && last->tensor == p.tensor && last->region == p.region &&
                static_cast<uint8_t *>(last->local) + last->length == p.local && last->offset + last->length == p.offset)
                last->length += p.length;
            else
                ps.push_back(p);
        }
        state_[c - first_chunk_] = InFlight;
    }
    inflight_++;
    trace::event("read_ask", s.worker, first, count);
    s.read_chunks(ucx_, mailbox_, first, count, ps, wait);
}

// The fetch's reads in flight are shared among its sources, one read per
// source per pass: a source visited first took every free place while it
// had chunks to offer, and on a striped fetch the stripe whose source had
// the most (finished upstream) took the reader's link from the stripe its
// followers waited for.
void Fetch::issue() {
    for (bool more = true; more;) {
        more = false;
        for (auto &s : sources_) more |= issue_read(*s) || issue_waiting_read(*s);
    }
    for (auto &s : sources_) issue_control(*s);
}

bool Fetch::issue_read(FetchSource &s) {
    // A complete source is read at once, beside the first read of its word
    // (docs/design.md, "Control word"); a filling one once the word said how
    // far it holds.
    if (s.failed || (!s.gen_known && !s.complete) ||
        inflight_ >= reads_in_flight_limit(cfg_.max_inflight, striped_ ? stripes_ : 1) ||
        s.chunk_inflight >= s.window.size())
        return false;
    uint32_t limit = std::min(s.end, s.avail);
    if (striped_)
        limit = std::min(limit, stripe_pace_limit(s, sources_, target_.layout().num_chunks(), stripes_,
                                                  2 * cfg_.max_inflight));
    while (s.next < limit) {
        uint32_t c = s.next++;
        if (state_[c - first_chunk_] != Missing) continue;
        // A reader slowed on purpose reads as a lane that slow does: a chunk at a time.
        uint32_t n = 1, most = faults().chunk_delay_us ? 1 : chunks_per_read(s.fastest, target_.layout().chunk_bytes());
        while (n < most && s.next < limit && state_[s.next - first_chunk_] == Missing) {
            s.next++;
            n++;
        }
        issue_chunks(s, c, n);
        return !s.failed;
    }
    return false;
}

// A source still filling is read ahead of what it holds: a waiting read of
// the next chunk, which its holder answers the moment it holds the chunk, so
// that neither the poll that would notice the chunk nor the request that
// would follow it delay the chunk on the holder's link. Each hop of a chain
// of relays paid both (perf/cluster/NOTES.md, "Waiting reads").
bool Fetch::issue_waiting_read(FetchSource &s) {
    if (!s.waits_ok || s.failed || !s.gen_known || s.waiting >= kWaitingReads || s.next < s.avail ||
        inflight_ >= reads_in_flight_limit(cfg_.max_inflight, striped_ ? stripes_ : 1))
        return false;
    uint32_t limit = s.end;
    if (striped_)
        limit = std::min(limit, stripe_pace_limit(s, sources_, target_.layout().num_chunks(), stripes_,
                                                  2 * cfg_.max_inflight));
    while (s.next < limit && state_[s.next - first_chunk_] != Missing) s.next++;
    if (s.next >= limit) return false;
    issue_chunks(s, s.next++, 1, /*wait=*/true);
    return !s.failed;
}

void Fetch::issue_control(FetchSource &s) {
    if (s.failed) return;
    if (!s.gen_known) {
        if (!s.ctrl_inflight) s.read_control_word(ucx_, mailbox_, event_seq_);
        return;
    }
    if (s.ctrl_inflight) return;
    // Confirm what was read once the pipe to this source is idle or a batch
    // is waiting, and poll a filling source for new chunks. A fetch that
    // serves confirms at once: its followers can only use confirmed chunks,
    // so every batch it waits for adds to the delay of each hop of a chain.
    bool confirm = !s.unconfirmed.empty() && (serve_ || s.changed || s.chunk_inflight == 0 ||
                                              s.unconfirmed.size() >= std::max<uint32_t>(1, cfg_.max_inflight / 2));
    // A source with waiting reads answers them when it can: no need to poll.
    bool follow = s.waiting == 0 && s.next >= s.avail && s.next < s.end && Clock::now() - s.ctrl_at >= s.follow_poll;
    if (confirm || follow) s.read_control_word(ucx_, mailbox_, event_seq_);
}

void Fetch::handle(const ReadEvent &e) {
    if (e.kind == ReadEvent::Verified) {
        take_verified();
        return;
    }
    FetchSource &s = *e.source;
    if (e.kind == ReadEvent::Chunk) {
        s.chunk_inflight--;
        inflight_--;
        if (e.waited) s.waiting--;
        if (e.error != nullptr || s.failed) {
            for (uint32_t c = e.chunk; c < e.chunk + e.count; ++c) state_[c - first_chunk_] = Missing;
            // Asked for after its replica changed: read elsewhere.
            if (s.changed && !s.failed && (e.error == kReadRefused || e.error == kReadNotYet)) return;
            // A guarded read refused: its generation ended (or its memory
            // went). What it sent before may still be kept: its word says.
            if (s.guarded && e.error == kReadRefused && !s.failed) {
                stop_reading(s, "the holder no longer serves that memory");
                return;
            }
            if (e.error == kReadNotYet && !s.failed) {
                s.not_yet(e.chunk);  // not a failure: the source is slow
                return;
            }
            if (!s.failed) {
                fail_source(s, str("read failed: ", e.error), e.error == kReadReset);
                // Released under us (the seqlock would have said so next):
                // another replica, and no blame for the worker.
                if (e.error == kReadRefused) s.then = FetchSource::Then::Elsewhere;
            }
            return;
        }
        trace::event("read_done", s.worker, e.chunk, static_cast<uint64_t>(e.latency.count()), e.count);
        if (!e.waited) s.on_read(e.latency, e.count);
        ++event_seq_;
        bool trusted = s.trusts(e.latency);
        for (uint32_t c = e.chunk; c < e.chunk + e.count; ++c) {
            state_[c - first_chunk_] = Got;
            waited_[c - first_chunk_] = e.waited;
            if (!trusted) s.unconfirmed.push_back({c, event_seq_});
        }
        hash_landed(s, e.chunk, e.count);
        s.last_progress = Clock::now();
        if (trusted) {
            std::vector<uint32_t> bad;
            for (uint32_t c = e.chunk; c < e.chunk + e.count; ++c) accept(s, c, bad);
            if (!bad.empty()) reject(s, bad);
            advance_served_prefix();
        }
        return;
    }
    s.ctrl_inflight = false;
    if (e.error != nullptr) {
        if (!s.failed) fail_source(s, str("reading its control word failed: ", e.error), e.error == kReadReset);
        return;
    }
    if (s.failed) return;
    std::string changed = s.check_generation(e.generation);
    if (!changed.empty() && s.keeps_across_change(e.unsettled)) {
        keep_what_was_sent(s, changed);
        advance_served_prefix();
        return;
    }
    if (!changed.empty()) {
        fail_source(s, changed);
        s.then = FetchSource::Then::Elsewhere;
        return;
    }
    confirm(s);
    s.saw_fill_level(e.level);
    trace::event("ctrl_ans", s.worker, s.avail, s.next);
    advance_served_prefix();
}

// Its replica changed, but its holder let every guarded read it had taken up
// finish before the bytes could change (Replica::end_generation): what landed
// before this word was read is the version's bytes, and so is what lands
// later while its word still says so. Nothing more is asked of it; the rest
// of its chunks are planned elsewhere at once.
void Fetch::keep_what_was_sent(FetchSource &s, const std::string &why) {
    confirm(s);
    stop_reading(s, why);
}

void Fetch::stop_reading(FetchSource &s, const std::string &why) {
    if (s.changed) return;
    s.changed = true;
    s.why = why;
    s.next = s.end;
    s.waits_ok = false;
    exclude_replica(s.replica);
    trace::event("source_changed", s.worker, s.chunk_inflight, s.unconfirmed.size());
    TH_LOG(Info, "fetch '", req_.model, "' v", version_, " shard ", req_.shard, ": source worker ", s.worker, " changed (",
           why, "): reading the rest elsewhere, keeping what it sent before where its word allows");
}

// The generation held from before these reads until after them: what they
// read is the version's bytes. Only reads that had completed when the control
// word was read count: it has a lane of its own and may overtake reads still
// queued at the source, but not those it already answered. A chunk the verify
// policy checks is confirmed once its hash, asked for when it landed, matches.
void Fetch::confirm(FetchSource &s) {
    std::vector<uint32_t> bad;
    auto keep = std::remove_if(s.unconfirmed.begin(), s.unconfirmed.end(), [&](const auto &u) {
        if (u.second > s.ctrl_issue_seq) return false;
        accept(s, u.first, bad);
        return true;
    });
    s.unconfirmed.erase(keep, s.unconfirmed.end());
    if (!bad.empty()) reject(s, bad);
}

void Fetch::accept(FetchSource &s, uint32_t c, std::vector<uint32_t> &bad) {
    if (!sums_.asked(c - first_chunk_)) {
        confirm_chunk(s, c);
    } else if (auto sum = sums_.sum(c - first_chunk_)) {
        judge(s, c, *sum, bad);
    } else {
        state_[c - first_chunk_] = Verifying;
    }
}

void Fetch::confirm_chunk(FetchSource &s, uint32_t c) {
    state_[c - first_chunk_] = Confirmed;
    trace::event("confirm", s.worker, c);
    confirmed_++;
    uint64_t n = 0;
    for (const Piece &p : target_.pieces(c)) n += p.length;
    bytes_from_[{s.worker, s.replica}] += n;
    bytes_done_ += n;
    if (s.peer && s.peer->path() == ReadPath::OneSided) bytes_one_sided_ += n;
    if (waited_[c - first_chunk_]) bytes_waited_ += n;
    if (s.changed) bytes_kept_ += n;
}

// Only a chunk held whole can be checked: a partial or ranged fetch may hold
// part of it. Hashed before the control word says whether the read holds:
// if it does not, the hash is of bytes nobody uses, and the chunk is read
// again only once the hash is back (hashing(), retire_failed_sources), so
// that no read writes what is being hashed.
void Fetch::hash_landed(FetchSource &s, uint32_t first, uint32_t count) {
    if (checksums_.empty()) return;
    ChunkVerifier::Batch check;
    for (uint32_t c = first; c < first + count; ++c) {
        std::optional<std::vector<ChunkPiece>> whole;
        if (verify_.check(c)) whole = target_.whole(c);
        uint32_t landing = sums_.landed(c - first_chunk_, whole.has_value());
        if (!whole) continue;
        check.chunks.push_back(c);
        check.landings.push_back(landing);
        check.pieces.push_back(std::move(*whole));
    }
    if (check.chunks.empty()) return;
    check.source = &s;
    if (!verifier_) verifier_ = std::make_unique<ChunkVerifier>(mailbox_);
    verifier_->submit(std::move(check));
}

void Fetch::take_verified() {
    if (!verifier_) return;
    for (ChunkVerifier::Batch &b : verifier_->take_done()) {
        if (b.code != TH_OK) fail_fetch(b.code, "checking fetched chunks against their checksums: " + b.error);
        std::vector<uint32_t> bad;
        for (size_t i = 0; i < b.chunks.size(); ++i) {
            uint32_t c = b.chunks[i];
            if (!sums_.hashed(c - first_chunk_, b.landings[i], b.sums[i])) continue;  // it landed again since
            if (state_[c - first_chunk_] == Verifying) judge(*b.source, c, b.sums[i], bad);
        }
        if (!bad.empty()) reject(*b.source, bad);
    }
    advance_served_prefix();
}

void Fetch::judge(FetchSource &s, uint32_t c, uint64_t sum, std::vector<uint32_t> &bad) {
    if (sum == checksums_[c]) {
        confirm_chunk(s, c);
        return;
    }
    state_[c - first_chunk_] = Missing;
    bad.push_back(c);
}

// A chunk that does not match the version's checksum is read again
// elsewhere, and its source reported.
void Fetch::reject(FetchSource &s, const std::vector<uint32_t> &bad) {
    mismatches_ += static_cast<uint32_t>(bad.size());
    TH_LOG(Warn, "fetch '", req_.model, "' v", version_, " shard ", req_.shard, ": chunk ", bad.front(), " from worker ",
           s.worker, " does not match the checksum its publisher declared; reading it elsewhere");
    std::string why = str("chunk ", bad.front(), " does not match the version's checksum");
    s.mismatched.insert(s.mismatched.end(), bad.begin(), bad.end());
    if (!s.failed) {
        fail_source(s, why);
    } else if (!s.retired) {  // dropped for another reason: this one is reported
        s.then = FetchSource::Then::Report;
        s.why = why;
    } else {  // retired meanwhile: not this worker again
        exclude_worker(s.worker);
        s.why = why;
        report(s);
    }
}

void Fetch::exclude_worker(uint64_t worker) {
    if (std::find(exclude_.begin(), exclude_.end(), worker) == exclude_.end()) exclude_.push_back(worker);
    source_lost_ = true;
}

void Fetch::exclude_replica(uint64_t replica) {
    if (std::find(exclude_replicas_.begin(), exclude_replicas_.end(), replica) == exclude_replicas_.end())
        exclude_replicas_.push_back(replica);
    source_lost_ = true;
}

bool Fetch::hashing(const FetchSource &s) const {
    return std::any_of(s.unconfirmed.begin(), s.unconfirmed.end(),
                       [&](const auto &u) { return sums_.in_flight(u.first - first_chunk_); });
}

// A source still filling that answers every read and has held nothing new for
// `quiet`: its process is up and reachable, but what it fills from stands
// still (its own source stalled, its reader paused). Reporting it as failed
// would keep it from this reader for seconds and, with a second such report,
// take it out of service for everyone; closing its endpoints would end the
// connection it reads from us on too. So its replica is left for this fetch,
// the server is told it stands still (nobody is planned onto it until it
// moves again), and its connection stays.
void Fetch::leave_stalled(FetchSource &s, Clock::duration quiet) {
    fail_source(s, str("it is still filling and has held nothing new for ",
                       std::chrono::duration_cast<std::chrono::milliseconds>(quiet).count(), " ms"));
    s.then = FetchSource::Then::Stalled;
    s.last_progress = Clock::now();  // a read of its word still in flight has a chunk timeout to land
}

void Fetch::fail_source(FetchSource &s, const std::string &why, bool closed_by_holder) {
    s.failed = true;
    // A holder that gave up on reads of its own from this process closed the
    // connection these reads used too: once, that holder is planned and
    // connected to again rather than reported (one that is gone fails to
    // connect).
    bool paused_here = s.peer && s.peer->dropped_by_pause();
    bool reconnect = !paused_here && closed_by_holder &&
                     std::find(reconnected_.begin(), reconnected_.end(), s.worker) == reconnected_.end();
    if (reconnect) reconnected_.push_back(s.worker);
    s.then = paused_here || reconnect ? FetchSource::Then::PlanAgain : FetchSource::Then::Report;
    s.why = why;
    last_failure_ = str("worker ", s.worker, ": ", why);
    TH_LOG(Info, "fetch '", req_.model, "' v", version_, " shard ", req_.shard, ": dropping source worker ", s.worker,
           ": ", why);
}

// A failed source's chunks go back to Missing once nothing of it is in flight;
// then it is excluded and, if it misbehaved, reported to the server.
void Fetch::retire_failed_sources() {
    for (auto &sp : sources_) {
        FetchSource &s = *sp;
        // A changed source is done once what it sent is confirmed.
        if (s.changed && !s.failed && s.chunk_inflight == 0 && !s.ctrl_inflight && s.unconfirmed.empty()) {
            s.failed = true;
            s.then = FetchSource::Then::Elsewhere;
        }
        if (!s.failed || s.retired || s.chunk_inflight > 0 || s.ctrl_inflight || hashing(s)) continue;
        s.retired = true;
        failed_sources_++;
        source_lost_ = true;
        for (auto &u : s.unconfirmed) state_[u.first - first_chunk_] = Missing;
        s.unconfirmed.clear();
        switch (s.then) {
        case FetchSource::Then::Report:
            exclude_worker(s.worker);
            report(s);
            break;
        case FetchSource::Then::Elsewhere:
            exclude_replica(s.replica);
            break;
        case FetchSource::Then::PlanAgain:
            break;
        case FetchSource::Then::Stalled:
            exclude_replica(s.replica);
            report(s);
            break;
        }
    }
}

void Fetch::report(const FetchSource &s) {
    const auto asked = Clock::now();
    session_.report_source(s.worker, s.replica, s.why, s.mismatched, s.then == FetchSource::Then::Stalled,
                           Deadline(cfg_.timeout_ms));
    server_seconds_ += seconds_since(asked);
}

// Stripe levels first: a reader that sees the leading run cover a chunk
// finds its stripe's level covering it too (a holder checks a read against
// the stripe's level, FetchSource::wait_for).
void Fetch::advance_served_prefix() {
    if (!serving_) return;
    uint32_t n = end_chunk_;  // a fetch that serves reads the whole shard
    bool advanced = false;
    for (uint32_t i = 0; i < stripe_served_.size(); ++i) {
        uint32_t begin = stripe_begin(n, stripes_, i), end = stripe_begin(n, stripes_, i + 1);
        uint32_t c = begin + stripe_served_[i];
        while (c < end && state_[c] == Confirmed) ++c;
        if (c - begin == stripe_served_[i]) continue;
        stripe_served_[i] = c - begin;
        serving_->stripe_filled(i, c - begin);
        advanced = true;
        trace::event("stripe_fill", i, c - begin, c);
    }
    uint32_t before = served_prefix_;
    while (served_prefix_ < end_chunk_ && state_[served_prefix_] == Confirmed) served_prefix_++;
    if (served_prefix_ != before) {
        serving_->filled(served_prefix_);
        advanced = true;
        trace::event("fill", served_prefix_);
    }
    if (advanced) ucx_.served_memory_advanced();
}

FetchResult Fetch::run() {
    Deadline deadline(fetch_timeout_ms(req_, cfg_));
    auto chunk_timeout = std::chrono::milliseconds(cfg_.chunk_timeout_ms);
    trace::event("fetch", session_.worker_id(), req_.shard, serve_);
    try {
        check_canceled();
        plan(deadline);
        while (!done()) {
            if (deadline.expired())
                fail_fetch(TH_ERR_TIMEOUT, str("deadline passed with ", confirmed_, " of ", needed_, " chunks fetched"));
            check_canceled();
            auto wait = std::chrono::microseconds(20000);
            issue();
            for (auto &s : sources_)
                if (!s->failed && s->starving() && s->waiting == 0) wait = std::min(wait, s->follow_poll);
            if (replan_due_)
                wait = std::clamp(std::chrono::duration_cast<std::chrono::microseconds>(replan_at_ - Clock::now()),
                                  std::chrono::microseconds(0), wait);
            ucx_.wake();
            for (const ReadEvent &e : mailbox_->take(wait)) handle(e);
            take_plans();
            report_progress(false);

            // A source that stops making progress is treated as dead: closing
            // its endpoint completes what is still in flight with an error.
            // One still filling that answers and only has nothing new is
            // left, after as long as a poll waits, for another: it stands
            // still, it is not broken (leave_stalled).
            auto now = Clock::now();
            for (auto &sp : sources_) {
                FetchSource &s = *sp;
                if (s.failed) {
                    if (!s.retired && now - s.last_progress > chunk_timeout) {
                        ucx_.close_peer(s.peer, "no completion after failure");
                        s.last_progress = now;
                    }
                    continue;
                }
                if (s.starving_and_answering(now, chunk_timeout)) {
                    if (now - s.last_progress > 2 * chunk_timeout) leave_stalled(s, 2 * chunk_timeout);
                    continue;
                }
                // Waiting reads wait for the source to fill: as long as a
                // poll of it would.
                bool busy = s.chunk_inflight > s.waiting || s.ctrl_inflight;
                bool starving = s.starving() || s.waiting > 0;
                auto limit = starving && !busy ? 2 * chunk_timeout : chunk_timeout;
                if ((busy || starving) && now - s.last_progress > limit) {
                    fail_source(s, str("no progress for ", std::chrono::duration_cast<std::chrono::milliseconds>(limit).count(),
                                       " ms"));
                    ucx_.close_peer(s.peer, "no progress");
                    s.last_progress = now;
                }
            }
            retire_failed_sources();
            bool active = (verifier_ && verifier_->pending() > 0) ||
                          std::any_of(sources_.begin(), sources_.end(), [](auto &s) {
                              return !s->failed && (s->next < s->end || s->chunk_inflight > 0 || s->ctrl_inflight ||
                                                    !s->unconfirmed.empty());
                          });
            bool draining = std::any_of(sources_.begin(), sources_.end(), [](auto &s) { return s->failed && !s->retired; });
            if (done() || draining) continue;
            if (!striped_) {
                if (!active) plan(deadline);
            } else if (!active || source_lost_ || (replan_due_ && Clock::now() >= replan_at_)) {
                plan_uncovered(deadline);
            }
        }
    } catch (const Error &e) {
        drain();
        finish(false);
        // No source left: say how the last one failed (the caller does
        // for NoSourceYet: it may fetch again).
        if (e.code() != TH_ERR_UNAVAILABLE || last_failure_.empty() ||
            dynamic_cast<const wire::NoSourceYet *>(&e) != nullptr)
            throw;
        fail(e.code(), e.what(), "; last failure here: ", last_failure_);
    } catch (...) {
        drain();
        finish(false);
        throw;
    }
    drain();
    finish(true);
    report_progress(true);
    FetchResult out;
    out.version = version_;
    out.replica = std::move(served_);
    out.stats = stats();
    return out;
}

void Fetch::report_progress(bool final) {
    if (!req_.progress || !have_layout_) return;
    auto now = Clock::now();
    if (!final && now - progress_at_ < std::chrono::milliseconds(req_.progress_interval_ms)) return;
    progress_at_ = now;
    req_.progress(bytes_done_, target_.bytes_wanted());
}

SyncStats Fetch::stats() const {
    SyncStats st;
    st.version = version_;
    st.bytes = bytes_done_;
    st.seconds = seconds_since(started_);
    st.server_seconds = server_seconds_;
    st.replans = plans_ > 0 ? plans_ - 1 : 0;
    st.failed_sources = failed_sources_;
    st.chunks = needed_;
    st.checksum_mismatches = mismatches_;
    st.bytes_one_sided = bytes_one_sided_;
    st.bytes_waited = bytes_waited_;
    st.bytes_kept = bytes_kept_;
    std::vector<uint64_t> workers;
    for (const auto &[src, n] : bytes_from_) {
        if (n == 0) continue;
        if (std::find(workers.begin(), workers.end(), src.first) == workers.end()) workers.push_back(src.first);
        auto it = publisher_.find(src.second);
        (it != publisher_.end() && it->second ? st.bytes_from_publisher : st.bytes_from_replicas) += n;
    }
    st.sources = static_cast<uint32_t>(workers.size());
    return st;
}

// Waits until no operation of this fetch is in flight, force-closing sources
// that do not complete, and stops its hashing.
void Fetch::drain() {
    drain_reads();
    verifier_.reset();  // finishes the batch in hand: then nothing reads the buffers
}

// A canceled fetch gives the reads in flight a moment, not a chunk timeout:
// a healthy source answers in milliseconds, a stuck one is closed.
constexpr std::chrono::milliseconds kCanceledDrain{200};

void Fetch::drain_reads() {
    bool canceled = th::canceled(req_.cancel);
    auto give_up = Clock::now() + (canceled ? kCanceledDrain : std::chrono::milliseconds(cfg_.chunk_timeout_ms) * 2);
    bool closed = false;
    for (;;) {
        bool busy = std::any_of(sources_.begin(), sources_.end(), [](auto &s) { return s->chunk_inflight > 0 || s->ctrl_inflight; });
        if (!busy) return;
        if (Clock::now() > give_up) {
            if (closed) {
                TH_LOG(Error, "fetch '", req_.model, "': operations still in flight after closing their endpoints");
                return;
            }
            for (auto &s : sources_)
                if (s->chunk_inflight > 0 || s->ctrl_inflight) ucx_.close_peer(s->peer, canceled ? "fetch canceled" : "fetch ended");
            closed = true;
            give_up = Clock::now() + std::chrono::milliseconds(cfg_.chunk_timeout_ms);
        }
        for (const ReadEvent &e : mailbox_->take(std::chrono::milliseconds(10))) {
            if (e.kind == ReadEvent::Verified) continue;
            if (e.kind == ReadEvent::Chunk) {
                e.source->chunk_inflight--;
                inflight_--;
            } else {
                e.source->ctrl_inflight = false;
            }
        }
    }
}

void Fetch::finish(bool ok) {
    finished_ = true;
    trace::event("fetch_end", session_.worker_id(), ok);
    trace::flush();
    if (serving_) serving_->stop_reporting();  // no Progress after FetchDone
    if (!have_layout_) {
        if (serving_) serving_->abandon();
        return;
    }
    uint64_t rid = serving_ ? serving_->replica().id() : 0;
    if (ok && serving_) serving_->complete(target_.layout().num_chunks());
    const auto asked = Clock::now();
    try {
        session_.call(
            [&](Builder &b, const Header &h) {
                std::vector<flatbuffers::Offset<SourceBytes>> from;
                for (auto &[src, n] : bytes_from_) from.push_back(CreateSourceBytes(b, src.first, n, src.second));
                auto us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started_).count();
                auto body = CreateFetchDone(b, b.CreateString(req_.model), version_, req_.shard, rid, ok, b.CreateVector(from),
                                            static_cast<uint64_t>(us));
                return wire::finish(b, h, body);
            },
            Deadline(cfg_.timeout_ms));
    } catch (const std::exception &e) {
        TH_LOG(Warn, "reporting the end of a fetch failed: ", e.what());
    }
    server_seconds_ += seconds_since(asked);
    if (!serving_) return;
    if (!ok) {
        serving_->abandon();
        return;
    }
    served_ = serving_->hold();
}

}  // namespace th
