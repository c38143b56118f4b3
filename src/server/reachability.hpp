// What a reader's failure to read from a worker says, and what the server
// does about it (docs/design.md, "A source one reader cannot reach").
//
// A reader that cannot read from a source reports it (SourceFailed). Either
// the source is gone (killed, paused, its host lost) or only the path
// between the two is (a firewall, a route, one NIC of a pair): the server
// cannot tell from one report, and taking a live source out for every reader
// because of one reader's path would starve the others. So:
//
// - the reader is not planned to that source again for a while (it is
//   "avoided": 5 s, doubling with each new failure up to 10 min); a read
//   from it that succeeds, or the source registering with another address
//   (a restarted or resumed process), ends that. A reader with no other
//   source left is told so (ErrorReply.no_source_yet) and fetches
//   again shortly: another reader fetching the version may soon serve it
//   (Client::fetch);
// - the source itself is taken out (suspect: routed to by nobody until it
//   registers again) when it is silent as well, heard from by the server
//   neither in the grace before the report nor within the grace after it
//   (two heartbeat periods), or when a second reader reports it within a
//   lease, unless a fetch that read from it ended well since the first of
//   those reports (a rack cut off from it, not the source). A source that
//   keeps talking to the server and that only one reader fails to read
//   stays in service for the others.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "server/catalog.hpp"

namespace th {

class Reachability {
  public:
    // The first avoidance, and the longest one.
    static constexpr uint64_t kFirstAvoidMs = 5'000, kLongestAvoidMs = 600'000;

    // heartbeat_ms: the period clients heartbeat at; lease_ms: how long
    // reports of one source count together.
    Reachability(uint32_t heartbeat_ms, uint32_t lease_ms);

    // reader could not read from holder. Returns why holder is now suspect,
    // or "" when it stays in service for the other readers.
    std::string reported(WorkerInfo &reader, WorkerInfo &holder, uint64_t now_ms);
    // Sources reported once that went silent since: suspect now. Returns
    // what it made suspect, with why, for the log.
    std::vector<std::pair<const WorkerInfo *, std::string>> settle(Catalog &catalog, uint64_t now_ms);
    // The workers reader is not planned to now, besides its own exclusions.
    std::vector<uint64_t> avoided(WorkerInfo &reader, const Catalog &catalog, uint64_t now_ms) const;
    // reader's fetch, which started at started_ms, ended at now_ms and read
    // from holder: unless reader reported holder during that fetch, holder
    // is not avoided any more and counts as serving.
    static void read_from(WorkerInfo &reader, WorkerInfo &holder, uint64_t started_ms, uint64_t now_ms);

  private:
    // Drops w's reports older than a lease: they no longer count together.
    void forget_old_reports(WorkerInfo &w, uint64_t now_ms) const;

    uint64_t grace_ms_, window_ms_;
    std::set<uint64_t> doubted_;  // workers reported once and not settled yet
};

}  // namespace th
