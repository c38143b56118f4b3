#include "network.hpp"

#include <algorithm>
#include <limits>

#include "fair_share.hpp"

namespace th::sim {

namespace {
// Bytes are doubles: a flow within this many bytes of its target is there.
constexpr double kEps = 1.0;
}  // namespace

int Network::add_link(double capacity) {
    links_.push_back(Link{capacity, {}, 0});
    return static_cast<int>(links_.size() - 1);
}

int Network::start(std::vector<int> path, double bytes, double target, double now) {
    int id;
    if (!free_flows_.empty()) {
        id = free_flows_.back();
        free_flows_.pop_back();
    } else {
        id = static_cast<int>(flows_.size());
        flows_.emplace_back();
    }
    Flow &f = flows_[id];
    f = Flow{};
    f.path = std::move(path);
    f.bytes = bytes;
    f.at = now;
    f.target = target;
    f.active = true;
    for (int l : f.path) {
        f.slot.push_back(links_[l].flows.size());
        links_[l].flows.push_back(id);
    }
    touch(id);
    return id;
}

void Network::stop(int id, double now) {
    Flow &f = flows_[id];
    settle(f, now);
    f.active = false;
    for (size_t i = 0; i < f.path.size(); ++i) {
        auto &on = links_[f.path[i]].flows;
        int last = on.back();
        on[f.slot[i]] = last;
        Flow &moved = flows_[last];
        for (size_t j = 0; j < moved.path.size(); ++j)
            if (moved.path[j] == f.path[i]) moved.slot[j] = f.slot[i];
        on.pop_back();
    }
    // Its former neighbours get its share: solve them again.
    auto it = components_.find(f.token);
    if (it != components_.end()) {
        for (int m : it->second)
            if (m != id) touch(m);
        components_.erase(it);
    }
    free_flows_.push_back(id);
}

void Network::set_target(int id, double target) {
    flows_[id].target = target;
    touch(id);
}

void Network::set_mark(int id, double mark) {
    flows_[id].mark = mark;
    touch(id);
}

double Network::bytes_at(int id, double t) const {
    const Flow &f = flows_[id];
    if (!f.active) return f.bytes;
    return std::min(f.target, f.bytes + f.rate * (t - f.at));
}

void Network::settle(Flow &f, double now) {
    if (f.active && now > f.at) {
        f.bytes = std::min(f.target, f.bytes + f.rate * (now - f.at));
        if (f.target - f.bytes < kEps) f.bytes = f.target;
    }
    f.at = std::max(f.at, now);
}

double Network::next_due() {
    while (!due_.empty() && !components_.count(due_.top().second)) due_.pop();
    return due_.empty() ? std::numeric_limits<double>::infinity() : due_.top().first;
}

void Network::fire_due(const Callbacks &cb) {
    if (next_due() == std::numeric_limits<double>::infinity()) return;
    auto [t, token] = due_.top();
    due_.pop();
    std::vector<int> members = std::move(components_[token]);
    components_.erase(token);
    now_ = t;
    for (int m : members) settle(flows_[m], t);
    for (int m : members) {
        Flow &f = flows_[m];
        if (!f.active || f.token != token) continue;
        if (f.mark >= 0 && f.bytes >= f.mark - kEps) {
            f.mark = -1;
            cb.on_mark(m);
        }
        if (f.active && f.token == token && f.bytes >= f.target - kEps) {
            cb.on_target(m);
            // A flow with nothing left to move must not hold bandwidth.
            if (f.active && f.token == token && f.bytes >= f.target - kEps) stop(m, t);
        }
    }
    for (int m : members)
        if (flows_[m].active && flows_[m].token == token) touch(m);
}

void Network::resolve(double now) {
    now_ = now;
    ++stamp_;
    std::vector<int> comp;
    for (size_t di = 0; di < dirty_.size(); ++di) {
        int start = dirty_[di];
        if (!flows_[start].active || flows_[start].seen == stamp_) continue;
        comp.clear();
        flows_[start].seen = stamp_;
        comp.push_back(start);
        std::vector<int> comp_links;
        for (size_t i = 0; i < comp.size(); ++i) {
            for (int l : flows_[comp[i]].path) {
                if (links_[l].seen == stamp_) continue;
                links_[l].seen = stamp_;
                comp_links.push_back(l);
                for (int g : links_[l].flows)
                    if (flows_[g].seen != stamp_) {
                        flows_[g].seen = stamp_;
                        comp.push_back(g);
                    }
            }
        }
        // Solve this component.
        cap_.clear();
        for (int l : comp_links) {
            links_[l].local = static_cast<int>(cap_.size());
            cap_.push_back(links_[l].capacity);
        }
        first_.assign(1, 0);
        path_links_.clear();
        for (int f : comp) {
            for (int l : flows_[f].path) path_links_.push_back(links_[l].local);
            first_.push_back(static_cast<int>(path_links_.size()));
        }
        solver_.solve(cap_, first_, path_links_, rates_);
        const std::vector<double> &rates = rates_;
        uint64_t token = next_token_++;
        double due = std::numeric_limits<double>::infinity();
        for (size_t i = 0; i < comp.size(); ++i) {
            Flow &f = flows_[comp[i]];
            settle(f, now);
            if (f.token != 0) components_.erase(f.token);
            f.token = token;
            f.rate = rates[i];
            auto until = [&](double b) {
                double d = b - f.bytes;
                if (d < kEps) return now;
                return f.rate > 0 ? now + d / f.rate : std::numeric_limits<double>::infinity();
            };
            due = std::min(due, until(f.target));
            if (f.mark >= 0) due = std::min(due, until(f.mark));
        }
        recomputed_flows_ += comp.size();
        components_[token] = comp;
        if (due < std::numeric_limits<double>::infinity()) due_.push({due, token});
    }
    dirty_.clear();
}

}  // namespace th::sim
