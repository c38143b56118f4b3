#include "kinds.hpp"

namespace th_fault {

// (3): the server the clients use is SIGKILLed with fetches in flight; every
// client was given both URLs, so they move to the standby, which takes over
// above the dead server's epoch and rebuilds its view from the workers. The
// standby starts first (clients use the server of the newest epoch).
void server_kill(Run &run) {
    std::string b = run.start_server("serverB", 3000, /*standby=*/true), a = run.start_server("serverA", 3000);
    if (a.empty() || b.empty()) return;
    // Either order: which server the list names first matters to clients.
    const std::string both = run.coin() ? a + "," + b : b + "," + a;
    run.set_client_options({"--heartbeat-ms", "200", "--timeout-ms", "1500", "--chunk-timeout-ms", "1000"});
    Layout layout = random_layout(run);
    if (!run.start_publisher(both, layout)) return;
    uint64_t delay_us = 0;
    std::vector<Reader> readers = start_slow_readers(run, both, layout, &delay_us, /*serve=*/run.coin());

    // Clients start on the server of the newest epoch: that is the one to kill.
    auto epoch = [](const std::string &url) {
        json s = server_status(url);
        return s.is_object() ? s["server_epoch"].get<uint64_t>() : 0;
    };
    uint64_t ea = epoch(a), eb = epoch(b);
    bool a_active = ea > eb;
    const std::string active = a_active ? a : b, standby = a_active ? b : a;
    const uint64_t active_epoch = std::max(ea, eb);
    Child &victim = *run.server(a_active ? "serverA" : "serverB");
    run.wait_serving(active, "publisher", 5000);
    sleep_random_part_of(run, layout.slow_fetch_ms(delay_us));

    auto fault = Clock::now();
    victim.signal(SIGKILL);
    auto flying = Run::in_flight(readers);
    const bool listed_first = both.rfind(active, 0) == 0;
    run.mark_fault(fault, "SIGKILL " + victim.name() + " (listed " + (listed_first ? "first" : "last") + ") with " +
                              std::to_string(std::count(flying.begin(), flying.end(), true)) + " fetches in flight");
    for (const Reader &r : readers) run.settle(r, layout.version);
    run.measure_recovery(readers, flying, fault, 0);
    run.expect_available(both, layout, {run.child("publisher")}, "the standby learns of it as it re-registers", 10000);
    json s = server_status(standby);
    if (!s.is_object() || s["server_epoch"].get<uint64_t>() <= active_epoch)
        run.violation("the standby did not take over above the dead server's epoch " + std::to_string(active_epoch) +
                      ": status " +
                      (s.is_object() ? std::to_string(s["server_epoch"].get<uint64_t>()) : "unreachable"));
}

}  // namespace th_fault
