#include "result_json.hpp"

namespace th::sim {

nlohmann::json to_json(const Setup &s) {
    nlohmann::json j = {{"workload", workload_name(s.workload)},
                        {"readers", s.readers},
                        {"holders", s.holders},
                        {"gpus", 1 + s.holders + s.readers},
                        {"size_bytes", s.size_bytes},
                        {"host_bytes_per_s", s.host_bps},
                        {"wan_bytes_per_s", s.wan_bps},
                        {"stagger_s", s.stagger_s},
                        {"chunk_bytes", s.chunk_bytes},
                        {"collective_segment", s.collective_segment},
                        {"preempt", s.preempt},
                        {"heartbeat_ms", s.heartbeat_ms},
                        {"seed", s.seed}};
    if (!s.ready_offsets_s.empty()) j["ready_offsets_s"] = s.ready_offsets_s;
    return j;
}

nlohmann::json to_json(const Result &r) {
    return {{"method", method_name(r.method)},
            {"makespan_s", r.makespan_s},
            {"floor_s", r.floor_s},
            {"update_s", r.update_s},
            {"reader_stall_s", r.reader_stall_s},
            {"trainer_stall_s", r.trainer_stall_s},
            {"total_stall_s", r.total_stall()},
            {"bytes_from_trainer", r.bytes_from_trainer},
            {"bytes_from_replicas", r.bytes_from_replicas},
            {"bytes_from_store", r.bytes_from_store},
            {"wan_bytes", r.wan_bytes},
            {"depth_max", r.depth_max},
            {"depth_mean", r.depth_mean},
            {"replans", r.replans},
            {"messages", r.messages},
            {"plans", r.plans},
            {"plan_seconds", r.plan_seconds},
            {"plan_max_seconds", r.plan_max_seconds},
            {"handle_seconds", r.handle_seconds},
            {"sim_wall_s", r.wall_s},
            {"events", r.events},
            {"recomputed_flows", r.recomputed_flows},
            {"violations", r.violations}};
}

}  // namespace th::sim
