// Side-by-side check of the simulator against the emulated cluster benchmark
// (perf/results/cluster.json), or, while that file does not exist, against
// the physical floor and the figures measured in the emulated cluster.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace th::sim {

// Prints the comparison (makespans, and summed reader stalls where the file
// has them; staggered readers ready at the recorded ready_offsets_s when
// present); returns the rows as JSON with "ok": every error within
// tolerance (a fraction, 0.10 = 10%).
nlohmann::json validate(const std::string &cluster_json, double tolerance);

}  // namespace th::sim
