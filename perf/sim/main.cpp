// tensorhub-sim: a flow-level simulator of weight updates at cluster scale,
// driving the real metadata service. See perf/SIM.md.
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <stdexcept>

#include "args.hpp"
#include "cluster.hpp"
#include "experiments.hpp"
#include "result_json.hpp"
#include "validate.hpp"

using namespace th::sim;

namespace {

const char *kUsage = R"(usage:
  tensorhub-sim --smoke                     small clusters, checks invariants (exit 1 on a violation)
  tensorhub-sim --validate FILE [--json OUT] compare with perf/results/cluster.json (or FACTS.md figures)
  tensorhub-sim --report OUT.json [--quick] [--parts a,b]
                                            the matrix perf/SIM.md is written from (--list-parts)
  tensorhub-sim [options]                    one update, every method (or --method), JSON on stdout
options: --workload standalone|elastic_join|cross_dc  --method tensorhub|trainer_direct|collective|store
  --readers N --holders N --size-mb X --chunk-kb X --host-gbit G --wan-gbit G --stagger-s S
  --hosts-per-rack N --rack-oversub X --preempt K --train-step-s S --heartbeat-ms MS --seed S
  --stripes K (tensorhub: stripes per shard; 0: as the server decides, 1: chains)
  --stripe-wait-ms MS (tensorhub: how long a striped reader waits before asking for the stripes left
                       out of its first plan; default the client's, 2)
)";

Workload workload_of(const std::string &name) {
    for (Workload w : {Workload::Standalone, Workload::Elastic, Workload::CrossDc})
        if (name == workload_name(w)) return w;
    throw std::runtime_error("unknown workload '" + name + "'");
}

Setup setup_of(const th_support::Args &a) {
    Setup s;
    s.workload = workload_of(a.get("workload", "standalone"));
    s.readers = static_cast<uint32_t>(a.get_u64("readers", s.readers));
    s.holders = static_cast<uint32_t>(a.get_u64("holders", s.workload == Workload::Elastic ? s.readers : 0));
    s.size_bytes = static_cast<uint64_t>(a.get_double("size-mb", double(s.size_bytes >> 20)) * (1 << 20));
    s.chunk_bytes = static_cast<uint64_t>(a.get_double("chunk-kb", double(s.chunk_bytes >> 10)) * 1024);
    if (a.has("host-gbit")) s.host_bps = a.get_double("host-gbit", 1) * 1e9 / 8;
    s.wan_bps = a.get_double("wan-gbit", s.workload == Workload::CrossDc ? 1 : 0) * 1e9 / 8;
    s.stagger_s = a.get_double("stagger-s", 0);
    s.hosts_per_rack = static_cast<uint32_t>(a.get_u64("hosts-per-rack", s.hosts_per_rack));
    s.rack_oversub = a.get_double("rack-oversub", s.rack_oversub);
    s.preempt = static_cast<uint32_t>(a.get_u64("preempt", 0));
    s.train_step_s = a.get_double("train-step-s", s.train_step_s);
    s.heartbeat_ms = static_cast<uint32_t>(a.get_u64("heartbeat-ms", 0));
    s.seed = a.get_u64("seed", 1);
    s.stripes = static_cast<uint32_t>(a.get_u64("stripes", s.stripes));
    s.stripe_wait_s = a.get_double("stripe-wait-ms", s.stripe_wait_s * 1e3) / 1e3;
    if (s.readers == 0 || s.size_bytes == 0 || s.chunk_bytes == 0 || s.host_bps <= 0)
        throw std::runtime_error("readers, size, chunk and host bandwidth must be positive");
    if (s.workload == Workload::CrossDc && s.wan_bps <= 0) throw std::runtime_error("cross_dc needs --wan-gbit > 0");
    return s;
}

void write(const std::string &path, const nlohmann::json &j) {
    std::ofstream out(path);
    if (!out) throw std::runtime_error("cannot write " + path);
    out << j.dump(1) << "\n";
}

}  // namespace

int main(int argc, char **argv) {
    // The service's per-request warnings (a simulated lost source) are
    // expected here; the results say what happened.
    setenv("TENSORHUB_LOG_LEVEL", "error", 0);
    try {
        th_support::Args a(argc, argv, {"smoke", "quick", "help", "list-parts"});
        auto bad = a.unknown({"smoke", "quick", "help", "list-parts", "parts", "validate", "json", "report", "workload", "method", "readers",
                              "holders", "size-mb", "chunk-kb", "host-gbit", "wan-gbit", "stagger-s", "hosts-per-rack",
                              "rack-oversub", "preempt", "train-step-s", "heartbeat-ms", "seed", "stripes",
                              "stripe-wait-ms"});
        if (!bad.empty()) throw std::runtime_error("unknown option --" + bad[0]);
        if (a.has("help")) {
            std::fputs(kUsage, stdout);
            return 0;
        }
        if (a.has("smoke")) return smoke() == 0 ? 0 : 1;
        if (a.has("validate")) {
            nlohmann::json v = validate(a.get("validate"), 0.10);
            if (a.has("json")) write(a.get("json"), v);
            return v["ok"].get<bool>() ? 0 : 1;
        }
        if (a.has("report")) {
            std::set<std::string> parts;
            std::string list = a.get("parts");
            for (size_t at = 0; at < list.size();) {
                size_t comma = std::min(list.find(',', at), list.size());
                parts.insert(list.substr(at, comma - at));
                at = comma + 1;
            }
            auto known = report_parts(a.has("quick"));
            for (const auto &p : parts)
                if (std::find(known.begin(), known.end(), p) == known.end()) throw std::runtime_error("unknown part '" + p + "'");
            write(a.get("report"), report_matrix(a.has("quick"), parts));
            return 0;
        }
        if (a.has("list-parts")) {
            for (const auto &p : report_parts(a.has("quick"))) std::printf("%s\n", p.c_str());
            return 0;
        }
        Setup s = setup_of(a);
        nlohmann::json out = {{"setup", to_json(s)}, {"results", nlohmann::json::array()}};
        for (Method m : {Method::TensorHub, Method::TrainerDirect, Method::Collective, Method::Store}) {
            if (a.has("method") && a.get("method") != method_name(m)) continue;
            out["results"].push_back(to_json(simulate(s, m)));
        }
        std::cout << out.dump(1) << "\n";
        return 0;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "tensorhub-sim: %s\n%s", e.what(), kUsage);
        return 2;
    }
}
