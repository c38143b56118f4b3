// The simulator's fixed experiments: the smoke run of the test suite and the
// matrix perf/SIM.md is written from.
#pragma once

#include <nlohmann/json.hpp>

namespace th::sim {

// Small clusters of every workload and method; prints each broken invariant.
// Returns the number of violations.
int smoke();

// Scales, the paper's setting and a stagger sweep. quick: smaller sizes, for
// trying the report pipeline.
nlohmann::json report_matrix(bool quick);

}  // namespace th::sim
