// One source of a fetch: a replica the plan routes a run of chunks to, and
// the reads the fetch makes of it. The fetch reads the source's control word
// before its first chunk and again after reading chunks: the generation must
// not have changed meanwhile (the reader's side of the seqlock, see
// control_word.hpp), and chunks_done tells how far a source that is still
// filling has got, so that the fetch follows right behind it. Reads complete
// on the UCX progress thread; their completions go to the fetch's mailbox and
// are handled on the fetching thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "client/control_word.hpp"
#include "client/read_window.hpp"
#include "common/deadline.hpp"
#include "transport/peer.hpp"
#include "transport/worker.hpp"
#include "wire/replica_desc.hpp"

namespace th {

// How often a reader re-reads the control word of a source that is still
// filling while it waits for the next chunk: soon after the source made
// progress, then less and less often while it makes none. Every read wakes
// the source's progress thread, and a chain of N readers on few cores pays
// for N pollers.
constexpr auto kFollowPollMin = std::chrono::microseconds(200);
constexpr auto kFollowPollMax = std::chrono::microseconds(3200);

struct FetchSource;

// How many consecutive chunks one read of a source may cover: on a lane
// where a chunk takes a few microseconds (device memory over cuda_ipc, a
// fast NIC), the work of each read on the fetch's and the progress thread
// costs as much as moving its bytes, so a read covers as many chunks as
// move in kMergeTarget, up to kMaxMergedBytes. The quickest read's time
// includes its fixed cost and any queueing behind the reads before it (on
// cuda_ipc, H200: ~14 us per 4 MiB chunk where the bytes take 2), so the
// target is well above that cost: at 100 us reads covered ~7 chunks and the
// lane ran at 1.6 of its 1.94 TB/s. Only on one-sided lanes: where the
// holder answers, it does so chunk by chunk anyway.
constexpr auto kMergeTarget = std::chrono::microseconds(500);
constexpr uint64_t kMaxMergedBytes = 64ull << 20;

// Chunks per read on a one-sided lane where the quickest chunk read took
// `fastest`: 1 on any lane slower than kMergeTarget per chunk (and with
// `fastest` at its initial max).
uint32_t chunks_per_read(std::chrono::microseconds fastest, uint64_t chunk_bytes);

// A read of a source that completed, or failed; or (Verified, no source) a
// batch of chunks hashed (ChunkVerifier).
struct ReadEvent {
    enum Kind { Chunk, Ctrl, Verified } kind;
    FetchSource *source;
    uint32_t chunk;     // Chunk events: the first chunk read,
    const char *error;  // nullptr: the read completed
    uint32_t count = 1;  // and how many
    uint64_t generation = 0;  // Ctrl events: the control word's generation,
    FillLevel level{};        // how much of the shard the source holds,
    uint64_t unsettled = UINT64_MAX;  // and its unsettled word (max: not read)
    std::chrono::microseconds latency{0};  // from asking to completion, for Chunk events
    bool waited = false;  // a waiting read (FetchSource::waiting)
};

// Where completions land. Shared with in-flight operations, so that one
// completing after the fetch gave up touches nothing freed.
struct Mailbox {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<ReadEvent> events;
    bool woken = false;
    void post(const ReadEvent &e);
    // Ends a take() without an event (a plan came back).
    void wake();
    // What was posted, waiting up to `wait` for something to be.
    std::deque<ReadEvent> take(std::chrono::microseconds wait);
};

// A destination piece of one chunk: local memory and the source tensor bytes.
struct Piece {
    void *local;
    const MemRegion *region;
    uint32_t tensor;
    uint64_t offset;
    uint64_t length;
};

struct FetchSource {
    uint64_t worker = 0;
    uint64_t replica = 0;
    PeerRef peer;
    th::ReplicaDesc desc;
    bool complete = false;
    uint32_t num_chunks = 0;  // of the shard
    uint32_t end = 0;    // assigned chunks end here (exclusive)
    uint32_t next = 0;   // next chunk to consider
    uint32_t avail = 0;  // the source holds [next, avail): all of it if complete, else from its control word
    // Striped fetches: the stripe its chunks lie in (kNoStripe: none, or
    // more than one), for keeping stripes level (stripe_pace_limit).
    static constexpr uint32_t kNoStripe = UINT32_MAX;
    uint32_t stripe = kNoStripe;
    bool gen_known = false;  // its word was read once and showed desc.ctrl_generation
    bool ctrl_inflight = false;
    uint64_t ctrl_issue_seq = 0;
    Clock::time_point ctrl_at{};
    std::chrono::microseconds follow_poll = kFollowPollMin;
    std::vector<std::pair<uint32_t, uint64_t>> unconfirmed;  // (chunk, completion seq)
    uint32_t chunk_inflight = 0;  // reads of chunks
    // Of those, waiting reads: asked for before the source held the chunk
    // (it answers once it does). Only of a filling source whose holder
    // answers them, on the active-message path; off for good once one came
    // back unanswered (kReadNotYet).
    uint32_t waiting = 0;
    bool waits_ok = false;
    uint32_t level_stripes = 0;  // the stripe count its control block showed last
    ReadWindow window{1};  // how many of chunk_inflight it may have
    // The quickest read of this source per chunk, on a one-sided lane (max
    // elsewhere): how many chunks a read covers (chunks_per_read).
    std::chrono::microseconds fastest = std::chrono::microseconds::max();
    // Read with guarded reads (its holder guards them, on the active-message
    // path): what they returned is kept across a change of its replica
    // while its word says the generation settled (control_word.hpp).
    bool guarded = false;
    // Its replica changed, and what it sent is kept: nothing more is asked
    // of it; reads in flight land or are refused, and once they are
    // confirmed it is retired.
    bool changed = false;
    bool failed = false;
    bool retired = false;
    // What its retirement does once it failed (Fetch::retire_failed_sources).
    enum class Then : uint8_t {
        Report,     // its worker failed: left out of the next plans, and reported to the server
        Elsewhere,  // its replica changed under us: that replica is left out, nobody is blamed
        PlanAgain,  // the source is fine: neither reported nor left out (this process was
                    // paused, or its holder closed the connection, once a fetch)
        Stalled,    // still filling, answering, but holding nothing new for a while: its
                    // replica is left out, and the server told it stands still
    };
    Then then = Then::Report;
    std::string why;
    // Chunks read from it that did not match their checksums: reported with
    // it, so that its holder checks its own copy of them.
    std::vector<uint32_t> mismatched;
    Clock::time_point last_progress = Clock::now();

    // Waiting for chunks it does not hold yet.
    bool starving() const { return gen_known && next >= avail && next < end; }
    // Starving, and answering: nothing of it in flight but a read of its
    // word (polled every kFollowPollMax at most while it starves), asked for
    // less than `within` ago. Its process is up and the path to it works; it
    // only has nothing new.
    bool starving_and_answering(Clock::time_point now, Clock::duration within) const {
        return starving() && waiting == 0 && chunk_inflight == 0 && (!ctrl_inflight || now - ctrl_at < within);
    }
    // Reads its control word; seq: the completions handled so far, so that
    // the answer confirms only chunk reads that had completed before it.
    void read_control_word(UcxWorker &ucx, const std::shared_ptr<Mailbox> &box, uint64_t seq);
    // Reads the pieces of chunks [first, first + count); one event once all
    // of them completed. wait: a waiting read of one chunk (wait_for).
    void read_chunks(UcxWorker &ucx, const std::shared_ptr<Mailbox> &box, uint32_t first, uint32_t count,
                     const std::vector<Piece> &pieces, bool wait = false);
    // What the holder waits for before answering a read of chunk c: its
    // stripe's level in the source's control block where the block has
    // per-stripe levels, else its leading run.
    WaitFor wait_for(uint32_t c) const;
    // A read of `count` chunks took `latency`.
    void on_read(std::chrono::microseconds latency, uint32_t count);
    // The seqlock check on a generation its control word returned: "" when
    // what was read since the previous check is the version's bytes, else why
    // not (the replica changed under us: the source must be dropped).
    std::string check_generation(uint64_t generation);
    // After a change (check_generation said so): whether what its guarded
    // reads returned is still the version's bytes, given its word's
    // unsettled generation.
    bool keeps_across_change(uint64_t unsettled) const { return guarded && unsettled < desc.ctrl_generation; }
    // Whether a guarded read of it that completed `latency` after it was
    // asked for holds the version's bytes without a read of its word: its
    // holder took it up before the generation ended, and waits
    // kAnswersFinishMs from then before marking the generation unsettled and
    // letting the bytes change, so an answer complete within half that was
    // sent whole before (control_word.hpp).
    bool trusts(std::chrono::microseconds latency) const {
        return guarded && latency < std::chrono::milliseconds(kAnswersFinishMs / 2);
    }
    // Its control word said how far it holds the shard.
    void saw_fill_level(const FillLevel &level);
    // A waiting read of chunk c came back unanswered (kReadNotYet): the
    // source is polled from now on, from c, which it does not hold.
    void not_yet(uint32_t c);
};

// A striped reader keeps its stripes level. Its sources share its link, and a
// stripe that runs ahead takes bandwidth from those behind, which are what it
// and its followers wait for (the shard is done when its last stripe is).
// Every reader pacing so also splits each relay's link, and the publisher's,
// evenly among the stripes it feeds; unpaced, the publisher's link went
// mostly to one stripe while the other's whole tree waited for it. Returns
// the chunk before which `s` stops reading for now: `lead` chunks past the
// least advanced other stripe still being read (UINT32_MAX: not held back).
// Sources of no single stripe, failed ones and those with nothing left to
// ask for neither hold others back nor are held.
uint32_t stripe_pace_limit(const FetchSource &s, const std::vector<std::unique_ptr<FetchSource>> &sources,
                           uint32_t num_chunks, uint32_t stripes, uint32_t lead);

// Reads a fetch keeps in flight: max_inflight per stripe it reads (1 when
// not striped). A striped reader reads each stripe from its own relay, and
// each of those flows needs reads queued at its relay to keep that link
// busy: sharing max_inflight among them left one read per relay with four
// stripes, and the readers of an N = 8 cluster took 1.45x of S/B against
// 1.11x with four per stripe (16 vCPUs, 256 KiB chunks).
uint32_t reads_in_flight_limit(uint32_t max_inflight, uint32_t stripes);

}  // namespace th
