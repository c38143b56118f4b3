// What one fetch or publish did, for the caller (th_sync_stats) and for the
// one INFO line each of them logs.
#pragma once

#include <cstdint>
#include <string>

namespace th {

struct SyncStats {
    uint64_t version = 0;
    uint64_t bytes = 0;
    double seconds = 0;
    uint32_t sources = 0;
    uint32_t replans = 0;
    uint32_t failed_sources = 0;
    uint32_t chunks = 0;
    uint64_t bytes_from_publisher = 0;
    uint64_t bytes_from_replicas = 0;
    uint32_t checksum_mismatches = 0;  // chunks read again: they did not match the version's checksum
    uint64_t bytes_one_sided = 0;      // of bytes, read with one-sided GETs (not through the holder's CPU)
    uint64_t bytes_waited = 0;         // of bytes, read with waiting reads (FetchSource::waiting)
    uint64_t bytes_kept = 0;           // of bytes, from sources that changed, kept (Fetch::keep_what_was_sent)
    double server_seconds = 0;         // of seconds, the call waiting for the metadata server's replies
    // False for a publish: its bytes are declared, not moved.
    bool moved = true;

    // bytes / seconds in GB/s (0 for a publish, or when nothing took time).
    double gbps() const { return moved && seconds > 0 ? bytes / seconds / 1e9 : 0; }
    // Folds in an attempt of the same call that came before this one
    // (Client::fetch fetched again): its failed sources, checksum mismatches
    // and waits for the server count, and so do its plans (this attempt's
    // first among them). Its bytes do not: they were read again, or were
    // another version's. The caller sets seconds to the whole call's.
    void add_earlier_attempt(const SyncStats &earlier);
    // "v7 shard 0: 64.0 MiB in 0.031 s (2.17 GB/s) from 2 sources (...), 0.001 s waiting for the server".
    std::string fetch_summary(uint32_t shard) const;
};

}  // namespace th
