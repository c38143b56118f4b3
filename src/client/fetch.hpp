// One fetch: asks the server for a plan, pulls the chunks from the planned
// sources straight into the caller's buffers (see fetch_source.hpp for the
// reads and the seqlock check), re-plans the chunks still missing around
// sources that fail or stall, and tells the server how it went. A fetch that
// serves fills a replica others can read from meanwhile (serving_replica.hpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "client/checksum.hpp"
#include "client/client_config.hpp"
#include "client/fetch_source.hpp"
#include "client/holdings.hpp"
#include "client/range_selection.hpp"
#include "client/replica.hpp"
#include "client/server_session.hpp"
#include "client/serving_replica.hpp"
#include "client/sync_stats.hpp"
#include "common/layout.hpp"

namespace th {

struct FetchRequest {
    std::string model;
    uint64_t version = UINT64_MAX;
    uint32_t shard = 0;
    uint32_t timeout_ms = 0;
    std::optional<std::string> tensor;  // partial fetch of one tensor
    uint64_t offset = 0;
    uint64_t length = 0;
    // th_fetch_ranges: these ranges of the shard, the destination of ranges[i]
    // being dst[i]. Empty: the whole shard, or the single tensor above.
    std::vector<RangeRequest> ranges;
    // Called on the fetching thread with (bytes done, bytes needed), at most
    // every progress_interval_ms and once at the end; may be empty.
    std::function<void(uint64_t, uint64_t)> progress;
    uint32_t progress_interval_ms = TH_DEFAULT_PROGRESS_INTERVAL_MS;
    th_verify verify = TH_DEFAULT_VERIFY;  // which chunks are checked against the version's checksums
};

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
    FetchResult run();

  private:
    enum ChunkState : uint8_t { Missing, InFlight, Got, Confirmed };

    void plan(const Deadline &deadline);
    void apply_layout(uint64_t version, uint64_t chunk_bytes, uint32_t num_shards, std::vector<TensorSpec> tensors);
    std::vector<Piece> pieces(uint32_t chunk) const;
    void issue(FetchSource &s);
    void issue_chunk(FetchSource &s, uint32_t chunk);
    void handle(const ReadEvent &e);
    // Confirms what s read; false when a chunk did not match its checksum
    // (s is then failed).
    bool confirm(FetchSource &s);
    // Whether a read chunk holds the version's bytes, as far as the verify
    // policy checks it.
    bool matches_checksum(uint32_t chunk);
    // Not a whole shard: one tensor's range, or th_fetch_ranges' ranges.
    bool partial() const { return req_.tensor.has_value() || !req_.ranges.empty(); }
    // Marks the chunks a selection touches as needed, the others as not.
    void apply_selection();
    void fail_source(FetchSource &s, const std::string &why);
    void retire_failed_sources();
    void advance_served_prefix();
    bool done() const { return confirmed_ == needed_; }
    void drain();
    void finish(bool ok);
    // Calls req_.progress if it is due (or, with final, unconditionally).
    void report_progress(bool final);
    SyncStats stats() const;
    [[noreturn]] void fail_fetch(th_status code, const std::string &why);

    ServerSession &session_;
    UcxWorker &ucx_;
    const ClientConfig &cfg_;
    FetchRequest req_;
    std::vector<Buffer> dst_;
    std::vector<RegionRef> dst_regions_;  // per dst buffer
    bool serve_;
    std::unique_ptr<ServingReplica> serving_;
    std::unique_ptr<Replica> served_;  // serving_'s replica once the fetch succeeded

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
    uint32_t inflight_ = 0;
    uint64_t event_seq_ = 0;

    std::vector<std::unique_ptr<FetchSource>> sources_;

    std::shared_ptr<Mailbox> mailbox_ = std::make_shared<Mailbox>();
    bool finished_ = false;
    Clock::time_point started_ = Clock::now();
};

}  // namespace th
