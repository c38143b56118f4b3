// Fault-injection hooks for tests, read once from the environment. They are
// documented (docs/design.md) but meant for test suites only.
//   TENSORHUB_FAULT_CHUNK_DELAY_US=N   sleep N us before posting each chunk read, one chunk a
//                                      read (as on a lane that slow: no merged reads)
//   TENSORHUB_FAULT_DROP_EVENTS=1      ignore every server event (forces catch-up queries)
//   TENSORHUB_FAULT_PLAN_DELAY_US=N    sleep N us between getting a plan and reading the source
//   TENSORHUB_FAULT_SPILL_DELAY_US=N   sleep N us while spilling a replica (a slow copy of a large shard)
//   TENSORHUB_FAULT_REDECLARE_DELAY_US=N  sleep N us between the Hello of a re-registration and the
//                                      declarations after it (the server does not list our replicas)
//   TENSORHUB_FAULT_HELLO_DELAY_US=N   (server) sleep N us before handling a Hello, so that requests
//                                      arriving meanwhile are answered first
//   TENSORHUB_FAULT_HEARTBEAT_DELAY_US=N  (server) sleep N us before handling a Heartbeat: a live
//                                      server whose answers come too late for some calls
//   TENSORHUB_FAULT_PLAN_ANSWER_DELAY_US=N  (server) sleep N us before handling a PlanFetch: a slow
//                                      or distant server
//   TENSORHUB_FAULT_RESOLVE_ANSWER_DELAY_US=N  (server) the same before handling a Resolve
#pragma once

#include <cstdint>
#include <cstdlib>

namespace th {

struct Faults {
    uint32_t chunk_delay_us = 0;
    bool drop_events = false;
    uint32_t plan_delay_us = 0;
    uint32_t spill_delay_us = 0;
    uint32_t redeclare_delay_us = 0;
    uint32_t hello_delay_us = 0;
    uint32_t heartbeat_delay_us = 0;
    uint32_t plan_answer_delay_us = 0;
    uint32_t resolve_answer_delay_us = 0;
};

inline const Faults &faults() {
    static const Faults f = [] {
        auto us = [](const char *name) {
            const char *v = std::getenv(name);
            return v ? static_cast<uint32_t>(std::strtoul(v, nullptr, 10)) : 0u;
        };
        Faults out;
        out.chunk_delay_us = us("TENSORHUB_FAULT_CHUNK_DELAY_US");
        if (const char *e = std::getenv("TENSORHUB_FAULT_DROP_EVENTS")) out.drop_events = e[0] == '1';
        out.plan_delay_us = us("TENSORHUB_FAULT_PLAN_DELAY_US");
        out.spill_delay_us = us("TENSORHUB_FAULT_SPILL_DELAY_US");
        out.redeclare_delay_us = us("TENSORHUB_FAULT_REDECLARE_DELAY_US");
        out.hello_delay_us = us("TENSORHUB_FAULT_HELLO_DELAY_US");
        out.heartbeat_delay_us = us("TENSORHUB_FAULT_HEARTBEAT_DELAY_US");
        out.plan_answer_delay_us = us("TENSORHUB_FAULT_PLAN_ANSWER_DELAY_US");
        out.resolve_answer_delay_us = us("TENSORHUB_FAULT_RESOLVE_ANSWER_DELAY_US");
        return out;
    }();
    return f;
}

}  // namespace th
