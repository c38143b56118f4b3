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

// The same with the flows' links in one array: flow f crosses
// links[first[f]] .. links[first[f + 1] - 1]. Writes rate (one per flow);
// reuses its own scratch space across calls.
class FairShare {
  public:
    void solve(const std::vector<double> &capacity, const std::vector<int> &first, const std::vector<int> &links,
               std::vector<double> &rate);

  private:
    std::vector<double> left_;
    std::vector<int> unfrozen_, link_first_, link_flows_, fill_;
    std::vector<char> frozen_;
    std::vector<std::pair<double, int>> heap_;
};

}  // namespace th::sim
