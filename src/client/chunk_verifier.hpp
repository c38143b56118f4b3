// Checks fetched chunks against the version's checksums off the fetch's
// thread, so that reads go on while a batch is hashed (device memory on its
// GPU): a fetch that hashed each batch in line stopped reading meanwhile,
// and the last batches' hashing was a tail every fetch paid. One thread per
// fetch, started by the first batch; it hashes every batch queued meanwhile
// at once (one kernel launch and one wait for device chunks), and each
// result wakes the fetch through its mailbox (a Verified event) and waits
// for take_done().
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "client/checksum.hpp"
#include "client/fetch_source.hpp"

namespace th {

class ChunkVerifier {
  public:
    struct Batch {
        FetchSource *source = nullptr;  // the chunks came from it
        std::vector<uint32_t> chunks;
        std::vector<uint32_t> landings;               // of each chunk, from ChunkSums::landed
        std::vector<std::vector<ChunkPiece>> pieces;  // of each chunk, in this process
        std::vector<uint64_t> sums;                   // computed, one per chunk
        th_status code = TH_OK;                       // hashing failed (a CUDA error, say)
        std::string error;
    };

    explicit ChunkVerifier(std::shared_ptr<Mailbox> box) : box_(std::move(box)) {}
    // Finishes the batch being hashed and drops the rest: afterwards nothing
    // reads the fetch's buffers.
    ~ChunkVerifier();
    ChunkVerifier(const ChunkVerifier &) = delete;
    ChunkVerifier &operator=(const ChunkVerifier &) = delete;

    void submit(Batch b);
    // The batches hashed since the last call.
    std::vector<Batch> take_done();
    // Submitted and not yet taken back (the fetch's thread only).
    size_t pending() const { return pending_; }

  private:
    void loop();

    std::shared_ptr<Mailbox> box_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::vector<Batch> todo_;
    std::vector<Batch> done_;
    bool stop_ = false;
    size_t pending_ = 0;
    std::thread thread_;
};

// What a fetch knows of each checked chunk's hash. A chunk is hashed as soon
// as it lands, not once the control word has confirmed its read: hashing then
// overlaps the reads still in flight, and the last chunks of a fetch do not
// wait for a confirmation before their hashing starts. Its verdict needs
// both. A chunk can land more than once (its source failed before
// confirming it, and it was read again elsewhere): a hash carries the landing
// it was asked for, and one of an earlier landing is dropped.
class ChunkSums {
  public:
    void reset(size_t chunks) { e_.assign(chunks, Entry{}); }
    // Chunk i landed, to be hashed or not (the sampling policy draws each
    // landing afresh): the landing's number, for its batch.
    uint32_t landed(size_t i, bool hash);
    // The hash of chunk i's landing came back: false if the chunk landed again since.
    bool hashed(size_t i, uint32_t landing, uint64_t sum);
    bool asked(size_t i) const { return e_[i].asked; }                    // the last landing is hashed
    bool in_flight(size_t i) const { return e_[i].asked && !e_[i].back; }  // and its hash is not back
    // The last landing's hash, once back.
    std::optional<uint64_t> sum(size_t i) const;

  private:
    struct Entry {
        uint32_t landing = 0;
        bool asked = false, back = false;
        uint64_t sum = 0;
    };
    std::vector<Entry> e_;
};

}  // namespace th
