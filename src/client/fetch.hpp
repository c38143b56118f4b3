// One fetch: asks the server for a plan, pulls chunks (UCX active-message reads) from
// the planned source straight into the caller's buffers, follows a source that
// is still filling through its control word, checks the source's generation
// after reading (seqlock) and re-plans around sources that fail or stall.
#pragma once

#include <chrono>

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>

#include "client/checksum.hpp"
#include "client/client.hpp"
#include "client/progress_reporter.hpp"

namespace th {

class Fetch {
  public:
    Fetch(Client &client, const FetchRequest &req, std::vector<Buffer> dst, bool serve);
    ~Fetch();
    FetchResult run();

  private:
    struct Source;
    struct Event {
        enum Kind { Chunk, Ctrl } kind;
        Source *source;
        uint32_t chunk;
        const char *error;  // nullptr: the read completed
        uint64_t ctrl[2];  // the control word read, for Ctrl events
        std::chrono::microseconds latency{0};  // from asking to completion, for Chunk events
    };
    // Where completions land. Shared with in-flight operations, so that one
    // completing after the fetch gave up touches nothing freed.
    struct Mailbox {
        std::mutex mu;
        std::condition_variable cv;
        std::deque<Event> events;
        void post(const Event &e);
    };
    // A destination piece of one chunk: local memory and the source tensor bytes.
    struct Piece {
        void *local;
        const MemRegion *region;
        uint32_t tensor;
        uint64_t offset;
        uint64_t length;
    };
    enum ChunkState : uint8_t { Missing, InFlight, Got, Confirmed };

    void plan(const Deadline &deadline);
    void apply_layout(uint64_t version, uint64_t chunk_bytes, uint32_t num_shards, std::vector<TensorSpec> tensors);
    std::vector<Piece> pieces(uint32_t chunk) const;
    void issue(Source &s);
    void issue_ctrl(Source &s);
    void issue_chunk(Source &s, uint32_t chunk);
    void handle(const Event &e);
    void fail_source(Source &s, const std::string &why);
    void retire_failed_sources();
    void advance_served_prefix();
    // Whether a read chunk holds the version's bytes, as far as the verify
    // policy checks it.
    bool matches_checksum(uint32_t chunk);
    bool done() const { return confirmed_ == needed_; }
    // Not a whole shard: one tensor's range, or th_fetch_ranges' ranges.
    bool partial() const { return req_.tensor.has_value() || !req_.ranges.empty(); }
    // Marks the chunks a selection touches as needed, the others as not.
    void apply_selection();
    void drain();
    void finish(bool ok);
    // Calls req_.progress if it is due (or, with final, unconditionally).
    void report_progress(bool final);
    SyncStats stats() const;
    [[noreturn]] void fail_fetch(th_status code, const std::string &why);

    Client &client_;
    FetchRequest req_;
    std::vector<Buffer> dst_;
    std::vector<RegionRef> dst_regions_;  // per dst buffer
    bool serve_;
    std::unique_ptr<Replica> replica_;

    bool have_layout_ = false;
    Layout layout_;
    uint64_t version_ = 0;
    uint64_t range_begin_ = 0, range_end_ = 0;  // flat bytes wanted
    uint64_t bytes_wanted_ = 0;                 // of them, the ones asked for
    RangeSelection selection_;                  // th_fetch_ranges only
    uint32_t first_chunk_ = 0, end_chunk_ = 0;  // chunks covering them
    std::vector<uint8_t> state_;                 // per chunk in [first_chunk_, end_chunk_)
    uint32_t needed_ = 0, confirmed_ = 0;
    uint32_t served_prefix_ = 0;
    std::vector<uint64_t> exclude_;           // workers that failed
    std::vector<uint64_t> exclude_replicas_;  // replicas that changed under us
    std::map<std::pair<uint64_t, uint64_t>, uint64_t> bytes_from_;  // (worker, replica) -> bytes confirmed
    std::map<uint64_t, bool> publisher_;  // source replica -> is a publisher's
    uint64_t bytes_done_ = 0;             // confirmed bytes in the requested range
    uint32_t plans_ = 0, failed_sources_ = 0;
    std::vector<uint64_t> checksums_;  // of every chunk of the shard, from the first plan; empty: none
    VerifyPolicy verify_{TH_DEFAULT_VERIFY};
    uint32_t mismatches_ = 0;
    Clock::time_point progress_at_{};
    // Tells the server how far our replica has filled (serving fetches only).
    std::unique_ptr<ProgressReporter> reporter_;
    uint32_t inflight_ = 0;
    uint64_t event_seq_ = 0;

    std::vector<std::unique_ptr<Source>> sources_;

    std::shared_ptr<Mailbox> mailbox_ = std::make_shared<Mailbox>();
    uint64_t registrations_at_start_ = 0;
    bool finished_ = false;
    Clock::time_point started_ = Clock::now();
};

}  // namespace th
