// One shard of one version held in this process's memory: the buffers it is
// served from (the caller's, or an owned copy), their registrations, the
// description readers get, and its control word. What happens to it (publish,
// release, mutation, spill) is the business of the Holdings it belongs to.
#pragma once

#include <atomic>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "client/checksum.hpp"
#include "client/control_word.hpp"
#include "client/spill_pool.hpp"
#include "common/layout.hpp"
#include "transport/worker.hpp"
#include "wire/replica_desc.hpp"

namespace th {

// Caller memory holding one tensor of a replica or a fetch destination.
struct Buffer {
    TensorSpec spec;
    void *data = nullptr;
    th_mem_kind kind = TH_MEM_HOST;
};

class Holdings;

class Replica {
  public:
    // Library memory behind an owned copy: a slab of the spill pool.
    using Storage = SpillPool::Lease;

    // Registers the buffers (cached per buffer: the same buffers published
    // again register nothing new), takes a control word from page and builds
    // the description readers get. storage: an owned copy's memory, which
    // the buffers point into.
    Replica(Holdings &holder, uint64_t id, std::string model, uint32_t shard, std::vector<Buffer> buffers,
            UcxWorker &ucx, ControlPage &page, Storage storage = {});
    ~Replica();
    Replica(const Replica &) = delete;
    Replica &operator=(const Replica &) = delete;

    uint64_t id() const { return id_; }
    const std::string &model() const { return model_; }
    uint64_t version() const { return version_; }
    uint32_t shard() const { return shard_; }
    uint32_t num_shards() const { return num_shards_; }
    uint64_t chunk_bytes() const { return chunk_bytes_; }
    const std::vector<Buffer> &buffers() const { return buffers_; }
    std::vector<TensorSpec> specs() const;
    const ReplicaDesc &desc() const { return desc_; }
    // The registration the i-th buffer lies in.
    const RegionRef &buffer_region(size_t i) const { return regions_[desc_.places[i].region]; }
    ControlWord *control_word() const { return ctrl_.word; }
    bool owned() const { return static_cast<bool>(storage_); }  // a copy in library memory, made for retention
    bool complete() const { return complete_; }
    bool mutating() const { return mutating_; }  // begin_mutation succeeded: its buffers may change
    // Its version is known to be committed: it was read, or a publish of one
    // of its shards answered committed. Declared with it again after a failover.
    bool committed() const { return committed_.load(); }
    void mark_committed() { committed_ = true; }
    // The holdings it belongs to, or nullptr once its client is destroyed.
    Holdings *holder() const { return holder_; }

    // The checksums of the version's chunks, declared with it (may be empty).
    const std::vector<uint64_t> &checksums() const { return checksums_; }
    void set_checksums(std::vector<uint64_t> sums) { checksums_ = std::move(sums); }

    // Where chunks lie in its buffers, as checksum() takes them (its
    // version's chunk size must be set).
    std::vector<std::vector<ChunkPiece>> chunk_pieces(const std::vector<uint32_t> &chunks) const;
    // All of its chunks, in order.
    std::vector<std::vector<ChunkPiece>> chunk_pieces() const;

    // Its holder found chunks of it not matching their checksums and
    // withdrew it: not served, nor declared again, from then on.
    bool withdrawn() const { return withdrawn_.load(); }
    void mark_withdrawn() { withdrawn_ = true; }

    // Ends the generation its readers know: its buffers may change once this
    // returns. The generation turns odd, then the answers of guarded reads
    // being sent from its buffers are let finish; those still being sent
    // after kAnswersFinishMs make the generation unsettled, so that their
    // readers drop them (control_word.hpp). Ended already: nothing to do.
    void end_generation();
    // Its bytes changed while its generation held (damaged memory, a write
    // without begin_mutation): the generation ends unsettled, so that its
    // readers drop what they have not confirmed (what they did is the
    // checksums' to catch).
    void distrust_generation();
    // It is a complete copy of from's bytes, made before from's generation
    // ended (a spill): once that ends, it answers from's guarded reads of
    // that generation while its own generation holds, so that from's
    // readers read on (transport/successions.hpp). If its own generation
    // then ends unsettled, so does from's.
    void succeed(const Replica &from);
    // Which version it holds; a fetch learns it from its first plan.
    void set_version(uint64_t version, uint32_t num_shards, uint64_t chunk_bytes);
    void mark_complete() { complete_ = true; }
    void mark_mutating() { mutating_ = true; }
    // At client shutdown: the handle stays valid for th_replica_release, but
    // it must not keep registrations alive past the UCX context.
    void detach();

  private:
    // Marks its generation unsettled, and those it answers for.
    void mark_unsettled();
    // Its generation ended: it answers for nobody from now on.
    void drop_successions();

    Holdings *holder_;
    UcxWorker *ucx_;
    uint64_t id_;
    std::string model_;
    uint64_t version_ = 0;
    uint32_t shard_;
    uint32_t num_shards_ = 1;
    uint64_t chunk_bytes_ = 0;
    std::vector<Buffer> buffers_;
    // Owned copies only. Declared before regions_ so that the slab goes back
    // to the pool after the registrations of the copy are dropped.
    Storage storage_;
    std::vector<RegionRef> regions_;  // distinct registrations, in desc order
    ReplicaDesc desc_;
    std::vector<uint64_t> checksums_;
    ControlPage::Slot ctrl_{};
    // The generations it answers for (succeed): their words are marked
    // with its own when it ends unsettled.
    std::vector<std::pair<ControlWord *, uint64_t>> predecessors_;
    bool complete_ = false;
    bool mutating_ = false;
    std::atomic<bool> withdrawn_{false};  // set on the heartbeat's thread
    std::atomic<bool> committed_{false};
};

}  // namespace th
