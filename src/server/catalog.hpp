// The catalog: the workers registered with the server and, per model, its
// versions, shards and the replicas that hold them, with the indexes plans
// read (replicas by neighbourhood and in the policy's load order) and the
// reads in flight. A change is checked against what is known before any of
// it is applied, and keeps the indexes in step. It decodes and encodes no
// message (only its event kinds are the wire's), reads no clock and takes no
// lock: the Service decodes requests and serializes access.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "server/catalog_records.hpp"
#include "server/policy.hpp"
#include "wire/wire.hpp"

namespace th {

// A holder as the policy sees it.
Candidate candidate(const ReplicaInfo &r);
// A holder plans may name: its worker is live, it is not being overwritten
// and no reader reported chunks of it that its holder has not checked yet.
bool routable(const ReplicaInfo &r);
// The most reported chunks kept per replica: its holder checks them at its
// next heartbeats.
constexpr size_t kMaxReportedChunks = 16;
// Adds the chunks reported is missing, up to kMaxReportedChunks in all.
// False when it added none: all were listed already (a report sent again
// after a failover, or by another reader) or the list is full.
bool add_reported_chunks(std::vector<uint32_t> &reported, const std::vector<uint32_t> &chunks);
// What a reader's report of mismatched chunks did to the catalog.
enum class Reported { no_such_replica, new_chunks, nothing_new };

// One shard of a version as its holder declares it (Publish).
struct Publication {
    ReplicaKey key;
    uint32_t num_shards = 0;
    Layout layout;
    uint64_t replica_id = 0;
    bool owned = false;  // a library-owned copy made for retention
    // Declared again to a server that took over moments ago: an older
    // version than the latest is accepted (its holders re-declare in any order).
    bool again = false;
    // With again: its holder saw the version committed. It is committed now
    // even if some shard's holders moved on before the takeover.
    bool committed = false;
    ReplicaDesc desc;
    std::vector<uint64_t> checksums;  // per chunk, or empty
};

// Where begin-mutation leaves a replica.
struct MutationCheck {
    uint32_t active_reads = 0;  // reads still planned onto it
    bool last_copy = false;     // the last complete copy of a required version: still routed to
    uint32_t filling = 0;       // other replicas of its shard still filling
};

// Bytes a reader read from one source (FetchDone).
struct SourceRead {
    uint64_t worker = 0;
    uint64_t replica = 0;
    uint64_t bytes = 0;
};

class Catalog {
  public:
    // Told of each commit, retirement and drained replica (replica id; else 0).
    using Notify = std::function<void(wire::EventKind, const std::string &model, uint64_t version, uint64_t replica)>;
    // A read in flight: the shard it reads and the reader, ordered so that a
    // version's reads are adjacent.
    using ReadKey = std::tuple<std::string, uint64_t, uint32_t, uint64_t>;  // model, version, shard, reader

    Catalog(PolicyConfig policy, Notify notify) : policy_(policy), notify_(std::move(notify)) {}

    // ---- workers
    WorkerInfo *find_worker(uint64_t id);
    // Registers w. A worker registered already forgets everything it held
    // first (it declares again what it still holds). Returns whether it was.
    bool register_worker(WorkerInfo w);
    // Forgets the worker, its replicas, its reads and its pins.
    void remove_worker(uint64_t id);
    // Workers not heard from for longer than lease_ms at now_ms.
    std::vector<uint64_t> silent(uint64_t now_ms, uint32_t lease_ms) const;
    const std::unordered_map<uint64_t, WorkerInfo> &workers() const { return workers_; }

    // ---- models and versions
    ModelInfo &model(const std::string &name);
    // The committed version a request means (a number, or UINT64_MAX: the latest).
    VersionInfo &committed_version(const std::string &model, uint64_t version);
    // Shard `shard` of a version of `model`; TH_ERR_INVALID_ARG when it has none.
    static ShardInfo &shard(VersionInfo &v, const std::string &model, uint32_t shard);
    // Must stay readable: the newest committed version, a pinned one, or one being read.
    bool is_required(const ModelInfo &m, const VersionInfo &v) const;
    void pin(const std::string &model, uint64_t version, uint64_t worker);
    void unpin(const std::string &model, uint64_t version, uint64_t worker);
    const std::map<std::string, ModelInfo> &models() const { return models_; }

    // ---- replicas
    // Checks p agrees with what is known of its version (TH_ERR_CONFLICT),
    // then records it, complete; the version commits with its last shard.
    // Returns whether the version is committed.
    bool publish(uint64_t worker, Publication p);
    // The reader's own buffers become a filling replica of key's shard
    // (id: not registered yet).
    ReplicaInfo &add_filling(uint64_t worker, const ReplicaKey &key, uint64_t id, ReplicaDesc desc);
    // The worker's replica with this id, or nullptr when none is registered;
    // TH_ERR_PROTOCOL when it is another worker's.
    ReplicaInfo *find_replica(uint64_t id, uint64_t worker);
    // The same, where a replica that is not registered is TH_ERR_NOT_FOUND.
    ReplicaInfo &replica(uint64_t id, uint64_t worker);
    const ReplicaInfo *replica(uint64_t id) const;
    void remove_replica(uint64_t id);
    // Stops routing to r unless it is the last complete copy of a required
    // version (its holder copies it first, then asks again).
    // rebuilding: the server took over moments ago and does not know yet
    // which versions are being read: every committed one counts as required.
    MutationCheck begin_mutation(ReplicaInfo &r, bool rebuilding = false);
    // A reader found these chunks of the worker's replica `id` not matching
    // the version's checksums: it is not routed to until its holder has
    // checked them (at most kMaxReportedChunks are kept).
    Reported report_mismatch(uint64_t worker, uint64_t id, const std::vector<uint32_t> &chunks);
    // The worker's replicas with reported chunks, and those chunks.
    std::vector<std::pair<uint64_t, std::vector<uint32_t>>> reported_chunks(uint64_t worker) const;
    // Its holder found these reported chunks of r intact.
    void chunks_match(ReplicaInfo &r, const std::vector<uint32_t> &chunks);
    // The worker's owned copies whose version nobody requires any more.
    std::vector<uint64_t> unneeded_owned_copies(uint64_t worker, bool rebuilding = false) const;

    // ---- reads
    // The reader's read of key's shard goes to src from now on.
    void start_read(uint64_t reader, const ReplicaKey &key, ReplicaInfo &src);
    // A striped read: src serves the reader a range besides its other
    // sources, which keep counting until the read ends or drop_reads.
    void add_read(uint64_t reader, const ReplicaKey &key, ReplicaInfo &src);
    // The reader's sources on these workers or replicas stop counting (it
    // failed to read them, or they changed under it).
    void drop_reads(uint64_t reader, const ReplicaKey &key, const std::vector<uint64_t> &workers,
                    const std::vector<uint64_t> &replicas);
    // r relays stripe `home` of its shard at `depth` in that stripe's tree.
    void set_relay(ReplicaInfo &r, uint32_t home, uint32_t depth);
    // The reader is done with key's shard: what each source served is
    // credited to it, and the reader's own replica (own_replica, 0: none)
    // completes when ok, else goes. Returns the bytes by replica_kind().
    std::vector<std::pair<const char *, uint64_t>> finish_read(uint64_t reader, const ReplicaKey &key, bool ok,
                                                               const std::vector<SourceRead> &from,
                                                               uint64_t own_replica);
    // Source replicas of each read in flight.
    const std::map<ReadKey, std::vector<uint64_t>> &reads() const { return reads_; }

  private:
    VersionInfo *find_version(const ReplicaKey &key);
    void check_agrees(const Publication &p) const;
    // Records a replica; the caller sets what ranks it, then indexes it.
    ReplicaInfo &new_replica(ShardInfo &s, const ReplicaKey &key, uint64_t worker, uint64_t id, ReplicaDesc desc);
    void end_read(const ReadKey &key);
    void end_source(uint64_t id);  // one reader's read of replica id ended
    void prune(ModelInfo &m);
    // Keep ShardInfo::nearby, by_load, complete_by_load and relays and
    // WorkerInfo::held in step with the replicas; rerank() after a change to
    // a worker's load, to whether its replicas are complete, or to the stripe
    // one relays.
    void index_replica(ReplicaInfo &r);
    void unindex_replica(ReplicaInfo &r);
    void rerank(WorkerInfo &w);
    void file(ReplicaInfo &r);
    void unfile(ReplicaInfo &r);

    PolicyConfig policy_;
    Notify notify_;
    // Hashed: every request looks its sender up. Elements stay put when it
    // grows (replicas point at their workers).
    std::unordered_map<uint64_t, WorkerInfo> workers_;
    std::map<std::string, ModelInfo> models_;
    std::unordered_map<uint64_t, ReplicaInfo *> replicas_;  // every replica, by id
    std::map<ReadKey, std::vector<uint64_t>> reads_;
    uint64_t next_seq_ = 1;
};

}  // namespace th
