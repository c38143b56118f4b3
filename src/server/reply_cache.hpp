// Replies to recent mutating requests, by (worker, request id): a request
// sent again (NNG re-sends after a reconnect) is answered again instead of
// applied twice. Keeps the newest `capacity` replies. Not thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <utility>

#include "wire/wire.hpp"

namespace th {

class ReplyCache {
  public:
    explicit ReplyCache(size_t capacity) : capacity_(capacity) {}

    // The reply already sent to this request, or nullptr.
    const wire::Bytes *find(const wire::Header &h) const {
        auto it = replies_.find({h.worker_id, h.request_id});
        return it == replies_.end() ? nullptr : &it->second;
    }

    void remember(const wire::Header &h, const wire::Bytes &reply) {
        Key key{h.worker_id, h.request_id};
        replies_[key] = reply;
        order_.push_back(key);
        if (order_.size() > capacity_) {
            replies_.erase(order_.front());
            order_.pop_front();
        }
    }

  private:
    using Key = std::pair<uint64_t, uint64_t>;
    size_t capacity_;
    std::map<Key, wire::Bytes> replies_;
    std::deque<Key> order_;
};

}  // namespace th
