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

}  // namespace th
