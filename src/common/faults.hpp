// Fault-injection hooks for tests, read once from the environment. They are
// documented (docs/design.md) but meant for test suites only.
//   TENSORHUB_FAULT_CHUNK_DELAY_US=N   sleep N us before posting each chunk GET
//   TENSORHUB_FAULT_DROP_EVENTS=1      ignore every server event (forces catch-up queries)
//   TENSORHUB_FAULT_PLAN_DELAY_US=N    sleep N us between getting a plan and reading the source
//   TENSORHUB_FAULT_SPILL_DELAY_US=N   sleep N us while spilling a replica (a slow copy of a large shard)
#pragma once

#include <cstdint>
#include <cstdlib>

namespace th {

struct Faults {
    uint32_t chunk_delay_us = 0;
    bool drop_events = false;
    uint32_t plan_delay_us = 0;
    uint32_t spill_delay_us = 0;
};

inline const Faults &faults() {
    static const Faults f = [] {
        Faults out;
        if (const char *d = std::getenv("TENSORHUB_FAULT_CHUNK_DELAY_US")) out.chunk_delay_us = static_cast<uint32_t>(std::strtoul(d, nullptr, 10));
        if (const char *e = std::getenv("TENSORHUB_FAULT_DROP_EVENTS")) out.drop_events = e[0] == '1';
        if (const char *p = std::getenv("TENSORHUB_FAULT_PLAN_DELAY_US")) out.plan_delay_us = static_cast<uint32_t>(std::strtoul(p, nullptr, 10));
        if (const char *s = std::getenv("TENSORHUB_FAULT_SPILL_DELAY_US")) out.spill_delay_us = static_cast<uint32_t>(std::strtoul(s, nullptr, 10));
        return out;
    }();
    return f;
}

}  // namespace th
