#include "client/sync_stats.hpp"

#include <cstdio>

namespace th {

std::string SyncStats::fetch_summary(uint32_t shard) const {
    char buf[448];
    std::snprintf(buf, sizeof buf,
                  "v%llu shard %u: %.1f MiB in %.3f s (%.2f GB/s) from %u source%s (publisher %.1f MiB, replicas %.1f MiB; "
                  "%.1f MiB one-sided, %.1f MiB waited for), %u chunks, %u replans, %u failed sources (%.1f MiB kept), "
                  "%.3f s waiting for the server",
                  static_cast<unsigned long long>(version), shard, bytes / 1048576.0, seconds, gbps(), sources,
                  sources == 1 ? "" : "s", bytes_from_publisher / 1048576.0, bytes_from_replicas / 1048576.0,
                  bytes_one_sided / 1048576.0, bytes_waited / 1048576.0, chunks, replans, failed_sources,
                  bytes_kept / 1048576.0, server_seconds);
    return buf;
}

void SyncStats::add_earlier_attempt(const SyncStats &earlier) {
    replans += earlier.replans + 1;
    failed_sources += earlier.failed_sources;
    checksum_mismatches += earlier.checksum_mismatches;
    server_seconds += earlier.server_seconds;
}

}  // namespace th
