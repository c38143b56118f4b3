// The flow-level network: links with a capacity, flows that cross a few of
// them and move bytes at their max-min fair rate. Rates are recomputed only
// for the connected component (flows linked through shared links) that a
// change touches, and each component has one pending "due" event: the first
// moment one of its flows reaches its target or its mark.
#pragma once

#include <cstdint>
#include <functional>
#include <queue>
#include <unordered_map>
#include <vector>

#include "fair_share.hpp"

namespace th::sim {

class Network {
  public:
    // Called when a flow's bytes reach its target (the flow then stands still
    // until the target moves or the flow stops) or its mark.
    struct Callbacks {
        std::function<void(int flow)> on_target;
        std::function<void(int flow)> on_mark;
    };

    int add_link(double capacity);
    double capacity(int link) const { return links_[link].capacity; }

    // Starts a flow at now with bytes already moved; returns its id.
    int start(std::vector<int> path, double bytes, double target, double now);
    void stop(int flow, double now);
    void set_target(int flow, double target);
    // A byte count whose crossing is reported (on_mark); < 0: none.
    void set_mark(int flow, double mark);

    double bytes_at(int flow, double t) const;
    double rate(int flow) const { return flows_[flow].rate; }
    bool active(int flow) const { return flows_[flow].active; }
    double target(int flow) const { return flows_[flow].target; }

    // The time of the next due event, or +inf.
    double next_due();
    // Handles the due event at the head of the queue (time next_due()).
    void fire_due(const Callbacks &cb);
    // Recomputes the rates of every component touched since the last call.
    void resolve(double now);

    size_t recomputed_flows() const { return recomputed_flows_; }

  private:
    struct Link {
        double capacity = 0;
        std::vector<int> flows;  // active flows
        uint32_t seen = 0;
        int local = 0;  // index in the component being solved
    };
    struct Flow {
        std::vector<int> path;
        std::vector<size_t> slot;  // index in each link's flows
        double bytes = 0, at = 0, rate = 0, target = 0, mark = -1;
        bool active = false;
        uint32_t seen = 0;
        uint64_t token = 0;  // the component it was last solved in
    };
    void settle(Flow &f, double now);
    void touch(int flow) { dirty_.push_back(flow); }

    std::vector<Link> links_;
    std::vector<Flow> flows_;
    std::vector<int> free_flows_;
    std::vector<int> dirty_;          // flows whose component must be solved again
    uint32_t stamp_ = 0;
    uint64_t next_token_ = 1;
    std::unordered_map<uint64_t, std::vector<int>> components_;
    using Due = std::pair<double, uint64_t>;
    std::priority_queue<Due, std::vector<Due>, std::greater<Due>> due_;
    double now_ = 0;
    size_t recomputed_flows_ = 0;
    // Scratch space of resolve(), kept between calls.
    FairShare solver_;
    std::vector<double> cap_, rates_;
    std::vector<int> first_, path_links_;
};

}  // namespace th::sim
