// The fault kinds: each runs one seeded run of its scenario (see README.md).
#pragma once

#include "run.hpp"

namespace th_fault {

void holder_fault(Run &run, bool pause);  // (1) source-kill, (2) source-stop
void server_kill(Run &run);               // (3)
void mutation(Run &run);                  // (4)
void control_faults(Run &run);            // (5)
void reader_kill(Run &run);               // (6)
void spot_loss(Run &run);                 // (7)
// (8) chaos, servers failing over along a list; (9) chaos-etcd, servers
// electing a leader in etcd.
void chaos(Run &run, int seconds, bool etcd);
void corrupt_holder(Run &run);             // (10)

}  // namespace th_fault
