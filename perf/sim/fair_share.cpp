#include "fair_share.hpp"

#include <functional>
#include <queue>

namespace th::sim {

std::vector<double> max_min_rates(const std::vector<double> &capacity, const std::vector<std::vector<int>> &flow_links) {
    size_t nl = capacity.size(), nf = flow_links.size();
    std::vector<double> rate(nf, 0.0), left(capacity);
    std::vector<int> unfrozen(nl, 0);
    std::vector<std::vector<int>> link_flows(nl);
    for (size_t f = 0; f < nf; ++f)
        for (int l : flow_links[f]) {
            unfrozen[l]++;
            link_flows[l].push_back(static_cast<int>(f));
        }
    // Links by the share they could still give each of their unfrozen flows;
    // entries go stale when a link's flows change and are skipped then.
    using Entry = std::pair<double, int>;
    std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
    auto share = [&](int l) { return left[l] / unfrozen[l]; };
    for (size_t l = 0; l < nl; ++l)
        if (unfrozen[l] > 0) heap.push({share(static_cast<int>(l)), static_cast<int>(l)});
    std::vector<char> frozen(nf, 0);
    while (!heap.empty()) {
        auto [s, l] = heap.top();
        heap.pop();
        if (unfrozen[l] == 0 || s != share(l)) continue;  // stale
        // The tightest link: its unfrozen flows get its fair share, which
        // the other links they cross give up.
        for (int f : link_flows[l]) {
            if (frozen[f]) continue;
            frozen[f] = 1;
            rate[f] = s;
            for (int o : flow_links[f]) {
                left[o] = std::max(0.0, left[o] - s);
                unfrozen[o]--;
                if (o != l && unfrozen[o] > 0) heap.push({share(o), o});
            }
        }
    }
    return rate;
}

}  // namespace th::sim
