// The simulator's fixed experiments: the smoke run of the test suite and the
// matrix perf/SIM.md is written from.
#pragma once

#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace th::sim {

// Small clusters of every workload and method; prints each broken invariant.
// Returns the number of violations.
int smoke();

// Scales, the paper's setting and a stagger sweep. quick: smaller sizes, for
// trying the report pipeline. parts: which of report_parts() to run (empty:
// all), so that several processes can share the matrix.
nlohmann::json report_matrix(bool quick, const std::set<std::string> &parts);
std::vector<std::string> report_parts(bool quick);

}  // namespace th::sim
