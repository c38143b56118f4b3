#include "transport/successions.hpp"

#include <algorithm>
#include <cstring>

namespace th {

void Successions::add(Succession s) {
    std::lock_guard lk(mu_);
    std::erase_if(list_, [&](const Succession &e) { return e.gen_at == s.gen_at && e.generation == s.generation; });
    list_.push_back(std::move(s));
}

void Successions::drop_to(uint64_t to_gen_at, uint64_t to_generation) {
    std::lock_guard lk(mu_);
    std::erase_if(list_,
                  [&](const Succession &e) { return e.to_gen_at == to_gen_at && e.to_generation == to_generation; });
}

Succession *Successions::find(uint64_t gen_at, uint64_t generation) {
    for (Succession &e : list_)
        if (e.gen_at == gen_at && e.generation == generation) return &e;
    return nullptr;
}

const Succession *Successions::find(uint64_t gen_at, uint64_t generation) const {
    return const_cast<Successions *>(this)->find(gen_at, generation);
}

std::optional<Moved> Successions::of(uint64_t gen_at, uint64_t generation) const {
    std::lock_guard lk(mu_);
    const Succession *s = find(gen_at, generation);
    if (!s) return std::nullopt;
    return Moved{0, {}, s->to_gen_at, s->to_generation};
}

std::optional<Moved> Successions::moved(uint64_t gen_at, uint64_t generation, uint64_t remote, uint64_t n,
                                        const uint8_t *rkey, size_t rkey_len) const {
    std::lock_guard lk(mu_);
    const Succession *s = find(gen_at, generation);
    if (!s) return std::nullopt;
    for (const Succession::Range &r : s->ranges) {
        bool within = remote >= r.from && n <= r.length && remote - r.from <= r.length - n;
        if (within && r.rkey.size() == rkey_len && std::memcmp(r.rkey.data(), rkey, rkey_len) == 0)
            return Moved{r.to + (remote - r.from), r.to_rkey, s->to_gen_at, s->to_generation};
    }
    return std::nullopt;
}

bool Successions::answered(uint64_t gen_at, uint64_t generation) {
    std::lock_guard lk(mu_);
    Succession *s = find(gen_at, generation);
    if (!s || s->used) return false;
    s->used = true;
    return true;
}

size_t Successions::size() const {
    std::lock_guard lk(mu_);
    return list_.size();
}

}  // namespace th
