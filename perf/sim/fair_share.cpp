#include "fair_share.hpp"

#include <algorithm>
#include <functional>

namespace th::sim {

std::vector<double> max_min_rates(const std::vector<double> &capacity, const std::vector<std::vector<int>> &flow_links) {
    std::vector<int> first{0}, links;
    for (const auto &fl : flow_links) {
        links.insert(links.end(), fl.begin(), fl.end());
        first.push_back(static_cast<int>(links.size()));
    }
    std::vector<double> rate;
    FairShare().solve(capacity, first, links, rate);
    return rate;
}

void FairShare::solve(const std::vector<double> &capacity, const std::vector<int> &first, const std::vector<int> &links,
                      std::vector<double> &rate) {
    size_t nl = capacity.size(), nf = first.size() - 1;
    rate.assign(nf, 0.0);
    left_.assign(capacity.begin(), capacity.end());
    unfrozen_.assign(nl, 0);
    for (int l : links) unfrozen_[l]++;
    // The flows of each link, in one array.
    link_first_.assign(nl + 1, 0);
    for (size_t l = 0; l < nl; ++l) link_first_[l + 1] = link_first_[l] + unfrozen_[l];
    fill_.assign(link_first_.begin(), link_first_.end() - 1);
    link_flows_.resize(links.size());
    for (size_t f = 0; f < nf; ++f)
        for (int i = first[f]; i < first[f + 1]; ++i) link_flows_[fill_[links[i]]++] = static_cast<int>(f);
    // Links by the share they could still give each of their unfrozen flows
    // (a min-heap); entries go stale when a link's flows change and are
    // skipped then.
    auto share = [&](int l) { return left_[l] / unfrozen_[l]; };
    auto later = std::greater<std::pair<double, int>>();
    heap_.clear();
    for (size_t l = 0; l < nl; ++l)
        if (unfrozen_[l] > 0) heap_.push_back({share(static_cast<int>(l)), static_cast<int>(l)});
    std::make_heap(heap_.begin(), heap_.end(), later);
    frozen_.assign(nf, 0);
    while (!heap_.empty()) {
        std::pop_heap(heap_.begin(), heap_.end(), later);
        auto [s, l] = heap_.back();
        heap_.pop_back();
        if (unfrozen_[l] == 0 || s != share(l)) continue;  // stale
        // The tightest link: its unfrozen flows get its fair share, which
        // the other links they cross give up.
        for (int k = link_first_[l]; k < link_first_[l + 1]; ++k) {
            int f = link_flows_[k];
            if (frozen_[f]) continue;
            frozen_[f] = 1;
            rate[f] = s;
            for (int i = first[f]; i < first[f + 1]; ++i) {
                int o = links[i];
                left_[o] = std::max(0.0, left_[o] - s);
                unfrozen_[o]--;
                if (o != l && unfrozen_[o] > 0) {
                    heap_.push_back({share(o), o});
                    std::push_heap(heap_.begin(), heap_.end(), later);
                }
            }
        }
    }
}

}  // namespace th::sim
