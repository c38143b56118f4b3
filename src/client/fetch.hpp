// One fetch: asks the server for a plan, pulls the chunks from the planned
// sources straight into the caller's buffers (see fetch_source.hpp for the
// reads and the seqlock check), re-plans the chunks still missing around
// sources that fail or stall, and tells the server how it went. A fetch that
// serves fills a replica others can read from meanwhile (serving_replica.hpp);
// it is planned per stripe (docs/design.md, "Fan-out depth"): a source per
// stripe, stripes without a relay yet asked for again shortly, and its own
// per-stripe fill levels in its control word.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "client/checksum.hpp"
#include "client/chunk_verifier.hpp"
#include "client/client_config.hpp"
#include "client/fetch_source.hpp"
#include "client/fetch_target.hpp"
#include "client/holdings.hpp"
#include "client/replica.hpp"
#include "client/server_session.hpp"
#include "client/serving_replica.hpp"
#include "client/sync_stats.hpp"
#include "common/layout.hpp"

namespace th {

// How long a striped reader leaves stripes the server could not give a
// relay yet before asking again: readers that become ready together plan
// within this, and a reader alone loses nothing (one stripe fills its link).
constexpr std::chrono::milliseconds kStripeWait{2};
// Waiting reads a fetch keeps in flight per filling source: the chunk the
// source receives next and the one after, so that its link has the next
// answer as soon as it holds the chunk.
constexpr uint32_t kWaitingReads = 2;

// A whole fetch's deadline: the request's own, else six control-call timeouts.
inline uint32_t fetch_timeout_ms(const FetchRequest &req, const ClientConfig &cfg) {
    return req.timeout_ms != 0 ? req.timeout_ms : cfg.timeout_ms * 6;
}

struct FetchResult {
    uint64_t version = 0;
    std::unique_ptr<Replica> replica;  // set when the fetch was asked to serve
    SyncStats stats;
};

class Fetch {
  public:
    Fetch(ServerSession &session, Holdings &holdings, UcxWorker &ucx, const FetchRequest &req, std::vector<Buffer> dst,
          bool serve);
    ~Fetch();
    // Throws wire::NoSourceYet when live holders exist but none may serve
    // this fetch now: it failed to read from each, or they are still filling.
    FetchResult run();
    // How the last source dropped failed ("worker N: why"); "" if none did.
    const std::string &last_failure() const { return last_failure_; }
    // The version being fetched; 0 before the first plan.
    uint64_t version() const { return version_; }
    // Whether a plan gave it a source to read from.
    bool had_source() const { return !sources_.empty(); }
    // What it did so far (after run(), whether that returned or threw).
    SyncStats stats() const;

  private:
    // Verifying: read and covered by a control-word read, its hash (asked
    // for when it landed, ChunkSums) not back yet.
    enum ChunkState : uint8_t { Missing, InFlight, Got, Verifying, Confirmed };

    // Plans what is not confirmed yet, as one range.
    void plan(const Deadline &deadline);
    // Striped: plans each run of chunks no live source is assigned.
    void plan_uncovered(const Deadline &deadline);
    // One PlanFetch for chunks [lo, lo + count) (count 0 and no layout yet:
    // the whole shard); adds its sources. replan: counts in the stats' replans.
    void ask(const Deadline &deadline, uint32_t lo, uint32_t count, wire::PlanMode mode, bool replan);
    // The same (mode StripedNow) on a thread of its own; its sources are
    // added by take_plans() once it is back.
    void ask_later(const Deadline &deadline, uint32_t lo, uint32_t count, bool replan);
    void take_plans();
    // A PlanFetch: what it asks, taken from the fetch on its thread, and what
    // came back with the peers of its sources, made by call_plan.
    struct PlanCall {
        std::string model;
        uint64_t version = 0;
        uint32_t shard = 0, lo = 0, count = 0;
        wire::PlanMode mode = wire::PlanMode::Single;
        bool replan = false;
        std::optional<th::ReplicaDesc> desc;
        uint64_t replica_id = 0;
        std::vector<uint64_t> exclude, exclude_replicas;
        std::vector<TensorSpec> given;
        bool partial = false;
        wire::Bytes reply;
        std::vector<UcxWorker::PeerOrError> peers;
        double server_seconds = 0;  // waiting for the server's reply
    };
    PlanCall plan_call(uint32_t lo, uint32_t count, wire::PlanMode mode, bool replan) const;
    static void call_plan(ServerSession &session, UcxWorker &ucx, PlanCall &c, const Deadline &deadline);
    void apply_plan(PlanCall &c);
    // Runs of needed chunks that no live source is assigned: (first, count).
    std::vector<std::pair<uint32_t, uint32_t>> uncovered() const;
    void apply_layout(uint64_t version, uint64_t chunk_bytes, uint32_t num_shards, std::vector<TensorSpec> tensors);
    // Asks every source for what it may read now, then reads control words
    // that are due.
    void issue();
    // One read of s, if it has chunks to ask for and a place in flight.
    bool issue_read(FetchSource &s);
    // A waiting read of s's next chunk (docs/design.md, "Waiting reads").
    bool issue_waiting_read(FetchSource &s);
    void issue_control(FetchSource &s);
    // One read of chunks [first, first + count) of s.
    void issue_chunks(FetchSource &s, uint32_t first, uint32_t count, bool wait = false);
    void handle(const ReadEvent &e);
    // Confirms what s read before its control word was: at once, or once
    // its hash is checked where the verify policy checks the chunk.
    void confirm(FetchSource &s);
    // Chunk c read from s holds the version's bytes: confirmed, or checked
    // first where the verify policy checks it (bad: those that do not match).
    void accept(FetchSource &s, uint32_t c, std::vector<uint32_t> &bad);
    void confirm_chunk(FetchSource &s, uint32_t c);
    // s's replica changed after its holder settled what it sent: kept.
    void keep_what_was_sent(FetchSource &s, const std::string &why);
    // Nothing more is asked of s; its chunks not yet read are planned
    // elsewhere, what it sent is confirmed by its word (or dropped).
    void stop_reading(FetchSource &s, const std::string &why);
    // Asks for the hashes of the chunks of a read that just landed that the
    // verify policy checks.
    void hash_landed(FetchSource &s, uint32_t first, uint32_t count);
    // Takes the hashed batches back: chunks already confirmed are judged, the
    // others wait for their control word.
    void take_verified();
    // A checked chunk whose read is confirmed and whose hash is back: it is
    // confirmed if the hash matches, else added to bad.
    void judge(FetchSource &s, uint32_t c, uint64_t sum, std::vector<uint32_t> &bad);
    // Chunks of s that do not match the version's checksums: read again
    // elsewhere, s dropped and reported.
    void reject(FetchSource &s, const std::vector<uint32_t> &bad);
    // A chunk s read and did not confirm is still being hashed.
    bool hashing(const FetchSource &s) const;
    // closed_by_holder: its reads failed because the holder's side closed
    // the connection (kReadReset).
    void fail_source(FetchSource &s, const std::string &why, bool closed_by_holder = false);
    void leave_stalled(FetchSource &s, Clock::duration quiet);
    // Plans leave this worker out from now on (a source of it misbehaved).
    void exclude_worker(uint64_t worker);
    // Plans leave this replica out from now on (it changed under us).
    void exclude_replica(uint64_t replica);
    void retire_failed_sources();
    // Tells the server the source's worker failed (or, with mismatched
    // chunks, that its replica may hold wrong bytes).
    void report(const FetchSource &s);
    void advance_served_prefix();
    bool done() const { return confirmed_ == needed_; }
    void drain();
    void drain_reads();
    void finish(bool ok);
    // Calls req_.progress if it is due (or, with final, unconditionally).
    void report_progress(bool final);
    [[noreturn]] void fail_fetch(th_status code, const std::string &why);
    void check_canceled();

    ServerSession &session_;
    UcxWorker &ucx_;
    const ClientConfig &cfg_;
    FetchRequest req_;
    FetchTarget target_;
    bool serve_;
    std::unique_ptr<ServingReplica> serving_;
    std::unique_ptr<Replica> served_;  // serving_'s replica once the fetch succeeded

    bool have_layout_ = false;
    uint64_t version_ = 0;
    uint32_t first_chunk_ = 0, end_chunk_ = 0;  // target_'s
    std::vector<uint8_t> state_;                 // per chunk in [first_chunk_, end_chunk_)
    uint32_t needed_ = 0, confirmed_ = 0;
    uint32_t served_prefix_ = 0;
    // Striped (the server plans this fetch per stripe): how many stripes,
    // how far each is confirmed from its start, and when uncovered chunks
    // are to be asked for again.
    bool striped_ = false;
    uint32_t stripes_ = 1;
    std::vector<uint32_t> stripe_served_;
    bool replan_due_ = false, source_lost_ = false;
    Clock::time_point replan_at_{};
    std::vector<uint64_t> exclude_;           // workers that failed
    std::vector<uint64_t> exclude_replicas_;  // replicas that changed under us
    std::vector<uint64_t> reconnected_;       // workers whose closed connection was made again
    std::map<std::pair<uint64_t, uint64_t>, uint64_t> bytes_from_;  // (worker, replica) -> bytes confirmed
    std::map<uint64_t, bool> publisher_;  // source replica -> is a publisher's
    uint64_t bytes_done_ = 0;             // confirmed bytes in the requested range
    uint64_t bytes_one_sided_ = 0;        // of those, read one-sided (ReadPath::OneSided)
    uint64_t bytes_waited_ = 0;           // of those, read with waiting reads
    uint64_t bytes_kept_ = 0;             // of those, from sources that changed (keep_what_was_sent)
    double server_seconds_ = 0;           // the fetch's thread waiting for the server (SyncStats)
    std::vector<bool> waited_;            // per chunk: its last read was a waiting read
    uint32_t plans_ = 0, failed_sources_ = 0;
    std::string last_failure_;  // the last source dropped ("worker N: why"), for the error
    std::vector<uint64_t> checksums_;  // of every chunk of the shard, from the first plan; empty: none
    VerifyPolicy verify_{TH_DEFAULT_VERIFY};
    ChunkSums sums_;  // per chunk in [first_chunk_, end_chunk_)
    uint32_t mismatches_ = 0;
    Clock::time_point progress_at_{};
    uint32_t inflight_ = 0;
    uint64_t event_seq_ = 0;

    std::vector<std::unique_ptr<FetchSource>> sources_;
    struct Planning {
        std::shared_ptr<PlanCall> call;
        std::future<void> done;
    };
    std::vector<Planning> planning_;  // asked for with ask_later, not back yet

    std::shared_ptr<Mailbox> mailbox_ = std::make_shared<Mailbox>();
    std::unique_ptr<ChunkVerifier> verifier_;  // from the first chunk checked
    bool finished_ = false;
    Clock::time_point started_ = Clock::now();
};

}  // namespace th
