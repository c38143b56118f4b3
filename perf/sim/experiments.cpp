#include "experiments.hpp"

#include <cstdio>

#include "cluster.hpp"
#include "result_json.hpp"

namespace th::sim {

namespace {

constexpr Method kMethods[] = {Method::TensorHub, Method::TrainerDirect, Method::Collective, Method::Store};

nlohmann::json run_all(const std::string &group, const Setup &s) {
    nlohmann::json out = {{"group", group}, {"setup", to_json(s)}, {"results", nlohmann::json::array()}};
    for (Method m : kMethods) {
        Result r = simulate(s, m);
        std::fprintf(stderr, "%-10s %-13s %6u GPUs %-15s makespan %9.3f s (floor %9.3f) stall %11.2f GPU-s  sim %6.2f s\n",
                     group.c_str(), workload_name(s.workload), 1 + s.holders + s.readers, method_name(m), r.makespan_s,
                     r.floor_s, r.total_stall(), r.wall_s);
        for (const auto &v : r.violations) std::fprintf(stderr, "  VIOLATION: %s\n", v.c_str());
        out["results"].push_back(to_json(r));
    }
    return out;
}

}  // namespace

int smoke() {
    int bad = 0;
    auto check = [&](const char *what, const Setup &s) {
        for (Method m : kMethods) {
            Result r = simulate(s, m);
            // One reader per datacenter crosses the WAN; the others follow it.
            if (m == Method::TensorHub && s.workload == Workload::CrossDc && r.wan_bytes != s.size_bytes)
                r.violations.push_back("the WAN carried " + std::to_string(r.wan_bytes) + " bytes, not one copy");
            std::printf("%-28s %-15s makespan %7.3f s floor %7.3f s stall %8.3f GPU-s depth %u msgs %4llu replans %u\n",
                        what, method_name(m), r.makespan_s, r.floor_s, r.total_stall(), r.depth_max,
                        static_cast<unsigned long long>([&] {
                            uint64_t n = 0;
                            for (auto &[k, v] : r.messages) n += v;
                            return n;
                        }()),
                        r.replans);
            for (const auto &v : r.violations) std::printf("  VIOLATION: %s\n", v.c_str());
            bad += static_cast<int>(r.violations.size());
        }
    };
    // Small and quick: 64 MiB in 1 MiB chunks, 1 gbit hosts, heartbeats on.
    auto small = [](Workload w, uint32_t readers) {
        Setup s;
        s.workload = w;
        s.readers = readers;
        s.size_bytes = 64ull << 20;
        s.chunk_bytes = 1ull << 20;
        s.heartbeat_ms = 100;
        return s;
    };
    Setup s = small(Workload::Standalone, 12);
    check("standalone ready", s);
    // Enough readers for the server to stripe the shard: trees, not a chain.
    Setup striped = small(Workload::Standalone, 40);
    check("standalone ready, striped", striped);
    striped.preempt = 3;
    striped.preempt_at_s = 0.2;
    check("striped, 3 relays lost", striped);
    Setup striped_x = small(Workload::CrossDc, 40);
    striped_x.wan_bps = striped_x.host_bps / 4;
    check("striped cross datacenter", striped_x);
    s.stagger_s = 1.0;
    check("standalone staggered", s);
    s.rack_oversub = 4;
    s.hosts_per_rack = 4;
    check("standalone oversubscribed", s);
    Setup e = small(Workload::Elastic, 10);
    e.holders = 6;
    e.preempt = 3;  // spot workers lost mid-update: their readers re-plan
    e.preempt_at_s = 0.2;
    check("elastic join, 3 lost", e);
    Setup x = small(Workload::CrossDc, 10);
    x.wan_bps = x.host_bps / 4;
    x.stagger_s = 0.5;
    check("cross datacenter", x);
    // The trainer wants its buffers back while a reader still fetches from
    // it: BeginMutation waits for the read to drain.
    Setup t = small(Workload::Standalone, 6);
    t.train_step_s = 0.1;
    check("trainer mutates early", t);
    std::printf(bad ? "%d invariant violations\n" : "all invariants hold\n", bad);
    return bad;
}

namespace {

// The matrix: (part name, group, setup), in the order SIM.md shows them.
struct Part {
    std::string name, group;
    Setup setup;
};

std::vector<Part> matrix(bool quick) {
    std::vector<Part> out;
    const double nic = 25e9;  // per GPU NIC, per direction
    const uint64_t GiB = 1ull << 30;
    // 2 GiB per GPU keeps the 10,000-GPU collective (256 KiB segments) to
    // tens of seconds of simulation; ratios to the floor hardly depend on it.
    uint64_t size = quick ? GiB / 4 : 2 * GiB;
    std::vector<uint32_t> scales = quick ? std::vector<uint32_t>{64, 1024} : std::vector<uint32_t>{64, 1024, 10000};
    for (uint32_t gpus : scales) {
        std::string at = "scale-" + std::to_string(gpus);
        Setup s;
        s.host_bps = nic;
        s.size_bytes = size;
        double floor_s = double(size) / nic;
        s.readers = gpus - 1;
        s.stagger_s = 10 * floor_s;
        out.push_back({at + "-standalone-staggered", "scale", s});
        s.stagger_s = 0;
        out.push_back({at + "-standalone-ready", "scale", s});
        Setup e = s;
        e.workload = Workload::Elastic;
        e.holders = gpus / 2;
        e.readers = gpus - 1 - e.holders;
        out.push_back({at + "-elastic", "scale", e});
        Setup x = s;
        x.workload = Workload::CrossDc;
        x.wan_bps = nic / 2;
        out.push_back({at + "-cross-dc-ready", "scale", x});
        x.stagger_s = 10 * floor_s;
        out.push_back({at + "-cross-dc-staggered", "scale", x});
    }
    // The paper's setting: 1,024 GPUs, ~25 GB/s NICs, tens to hundreds of GB.
    for (uint64_t gib : quick ? std::vector<uint64_t>{1} : std::vector<uint64_t>{32, 128}) {
        Setup s;
        s.host_bps = nic;
        s.size_bytes = gib * GiB;
        s.collective_segment = 4ull << 20;  // large messages: larger segments
        s.readers = 1023;
        s.stagger_s = 10 * double(s.size_bytes) / nic;
        out.push_back({"paper-" + std::to_string(gib) + "gib", "paper", s});
    }
    // How the collective's stall depends on how spread the rollouts' ready times are.
    for (int spread : {0, 1, 2, 5, 10, 20}) {
        Setup s;
        s.host_bps = nic;
        s.size_bytes = size;
        s.readers = 1023;
        s.stagger_s = spread * double(size) / nic;
        out.push_back({"stagger-" + std::to_string(spread), "stagger", s});
    }
    return out;
}

}  // namespace

std::vector<std::string> report_parts(bool quick) {
    std::vector<std::string> names;
    for (const Part &p : matrix(quick)) names.push_back(p.name);
    return names;
}

nlohmann::json report_matrix(bool quick, const std::set<std::string> &parts) {
    nlohmann::json groups = nlohmann::json::array();
    for (const Part &p : matrix(quick))
        if (parts.empty() || parts.count(p.name)) {
            groups.push_back(run_all(p.group, p.setup));
            groups.back()["part"] = p.name;
        }
    return groups;
}

}  // namespace th::sim
