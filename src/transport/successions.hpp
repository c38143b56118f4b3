// Copies that answer for the replica they were made from. A holder that
// copies a replica's bytes before letting them change (a spill into an owned
// copy, at begin_mutation or release) has the same bytes, in the same layout,
// at other addresses. Guarded reads of the replica's generation that ended
// are answered from the copy, while the copy's own generation holds: their
// readers go on as if nothing changed, instead of stopping and asking the
// server for a new source (docs/design.md, "Guarded reads").
//
// Only guarded reads (active-message path) are answered so: they name the
// generation they are for, so a read of the generation the copy was made
// from can be told from one of the bytes the memory holds next. One-sided
// reads never reach the holder's CPU.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

namespace th {

struct Succession {
    // A buffer of the replica and where the copy holds its bytes. A read is
    // moved only if it names the buffer's registration (its packed rkey: the
    // capability to read it) and lies within it.
    struct Range {
        uint64_t from = 0;
        uint64_t length = 0;
        std::vector<uint8_t> rkey;
        uint64_t to = 0;
        std::vector<uint8_t> to_rkey;
    };
    uint64_t gen_at = 0;      // the replica's generation word
    uint64_t generation = 0;  // the generation the copy was made of (even)
    std::vector<Range> ranges;
    uint64_t to_gen_at = 0;  // the copy's generation word
    uint64_t to_generation = 0;
    bool used = false;  // it has answered a read
};

// Where a read moved: the copy's bytes and the generation they hold under.
struct Moved {
    uint64_t remote = 0;
    std::vector<uint8_t> rkey;
    uint64_t gen_at = 0;
    uint64_t generation = 0;
};

class Successions {
  public:
    // A copy answers for the replica from now on (replacing any earlier
    // copy of the same generation).
    void add(Succession s);
    // The copy's generation ended: it answers for nobody.
    void drop_to(uint64_t to_gen_at, uint64_t to_generation);
    // The copy that answers for generation at gen_at, if any (no range:
    // remote is 0).
    std::optional<Moved> of(uint64_t gen_at, uint64_t generation) const;
    // Where a read of n bytes at remote under rkey, made for generation at
    // gen_at, lies in the copy; nullopt if no copy holds all of it.
    std::optional<Moved> moved(uint64_t gen_at, uint64_t generation, uint64_t remote, uint64_t n, const uint8_t *rkey,
                               size_t rkey_len) const;
    // The copy answered a read for generation at gen_at: true the first time.
    bool answered(uint64_t gen_at, uint64_t generation);
    size_t size() const;

  private:
    Succession *find(uint64_t gen_at, uint64_t generation);  // caller holds mu_
    const Succession *find(uint64_t gen_at, uint64_t generation) const;
    mutable std::mutex mu_;  // taken on the progress thread: never held into UCX
    std::vector<Succession> list_;
};

}  // namespace th
