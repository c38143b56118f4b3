#include "server/reachability.hpp"

#include <algorithm>
#include <functional>
#include <string_view>

#include "common/error.hpp"

namespace th {

namespace {

size_t address_hash(const std::vector<uint8_t> &a) {
    return std::hash<std::string_view>{}(std::string_view(reinterpret_cast<const char *>(a.data()), a.size()));
}

uint64_t first_report(const WorkerInfo &w) {
    uint64_t first = UINT64_MAX;
    for (const auto &[reader, at] : w.reported_by) first = std::min(first, at);
    return first;
}

// Takes w out of service until it registers again (Catalog's routable()).
void take_out(WorkerInfo &w) {
    w.suspect = true;
    w.reported_by.clear();
}

// Heard from within grace_ms of now (its last request, heartbeats included).
bool talking(const WorkerInfo &w, uint64_t now_ms, uint64_t grace_ms) { return now_ms <= w.last_seen_ms + grace_ms; }

}  // namespace

Reachability::Reachability(uint32_t heartbeat_ms, uint32_t lease_ms)
    : grace_ms_(2 * uint64_t{std::max<uint32_t>(heartbeat_ms, 1)}), window_ms_(lease_ms) {}

std::string Reachability::reported(WorkerInfo &reader, WorkerInfo &holder, uint64_t now_ms) {
    auto &a = reader.avoid[holder.id];
    a.strikes = std::min<uint32_t>(a.strikes + 1, 16);
    a.until_ms = now_ms + std::min(kFirstAvoidMs << (a.strikes - 1), kLongestAvoidMs);
    a.reported_ms = now_ms;
    a.address = address_hash(holder.ucx_address);
    if (holder.suspect) return "";
    forget_old_reports(holder, now_ms);
    holder.reported_by[reader.id] = now_ms;
    std::string why;
    if (!talking(holder, now_ms, grace_ms_))
        why = str("it has not been heard from for ", now_ms - holder.last_seen_ms, " ms either");
    else if (holder.reported_by.size() >= 2 && holder.served_ms < first_report(holder))
        why = str(holder.reported_by.size(), " readers could not read from it within ", window_ms_,
                  " ms, and no fetch read from it since");
    if (why.empty()) {
        doubted_.insert(holder.id);
        return "";
    }
    take_out(holder);
    doubted_.erase(holder.id);
    return why;
}

std::vector<std::pair<const WorkerInfo *, std::string>> Reachability::settle(Catalog &catalog, uint64_t now_ms) {
    std::vector<std::pair<const WorkerInfo *, std::string>> out;
    for (auto it = doubted_.begin(); it != doubted_.end();) {
        WorkerInfo *w = catalog.find_worker(*it);
        if (w != nullptr && !w->suspect) {
            if (!talking(*w, now_ms, grace_ms_)) {
                take_out(*w);
                out.emplace_back(w, str("a reader could not read from it, and it has not been heard from for ",
                                        now_ms - w->last_seen_ms, " ms since"));
            } else {
                forget_old_reports(*w, now_ms);
                if (!w->reported_by.empty()) {
                    ++it;
                    continue;
                }
            }
        }
        it = doubted_.erase(it);
    }
    return out;
}

void Reachability::forget_old_reports(WorkerInfo &w, uint64_t now_ms) const {
    std::erase_if(w.reported_by, [&](const auto &kv) { return kv.second + window_ms_ < now_ms; });
}

std::vector<uint64_t> Reachability::avoided(WorkerInfo &reader, const Catalog &catalog, uint64_t now_ms) const {
    std::vector<uint64_t> out;
    for (auto it = reader.avoid.begin(); it != reader.avoid.end();) {
        auto w = catalog.workers().find(it->first);
        bool gone = w == catalog.workers().end() || address_hash(w->second.ucx_address) != it->second.address;
        if (gone) {
            it = reader.avoid.erase(it);
            continue;
        }
        // Expired entries are kept for their strikes until a read succeeds.
        if (now_ms < it->second.until_ms) out.push_back(it->first);
        ++it;
    }
    return out;
}

void Reachability::read_from(WorkerInfo &reader, WorkerInfo &holder, uint64_t started_ms, uint64_t now_ms) {
    auto it = reader.avoid.find(holder.id);
    if (it != reader.avoid.end()) {
        if (it->second.reported_ms >= started_ms) return;  // what it read came before it gave up on holder
        reader.avoid.erase(it);
    }
    holder.served_ms = now_ms;
}

}  // namespace th
