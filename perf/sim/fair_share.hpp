// Max-min fair sharing of links among flows (progressive filling): every
// flow's rate grows at the same pace until one of its links is full; flows
// on a full link keep their rate and the others go on growing.
#pragma once

#include <vector>

namespace th::sim {

// capacity[l]: bytes/s of link l. flow_links[f]: the links flow f crosses
// (each at most once). Returns each flow's rate. A flow that crosses no link
// gets rate 0 (it has no bottleneck to define one).
std::vector<double> max_min_rates(const std::vector<double> &capacity, const std::vector<std::vector<int>> &flow_links);

}  // namespace th::sim
