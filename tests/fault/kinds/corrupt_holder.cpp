#include "kinds.hpp"

namespace th_fault {

// (10) corrupt-holder: r1, the complete holder plans prefer (it is not the
// publisher), has a byte of its first shard changed behind the library's
// back (SIGUSR1: a stray write, as a bad DIMM or a write without
// begin-mutation would make). Readers that check every chunk then fetch the
// version, one after another. What must hold: none returns the changed byte;
// r1's replica of that shard is gone from the server within two heartbeats
// and a call of the first report (its holder checked its own copy and
// withdrew it) while r1 stays registered; and a reader that checks nothing
// fetches the version right afterwards.
void corrupt_holder(Run &run) {
    const int heartbeat_ms = 200, timeout_ms = 2000;
    std::string url = run.start_server("server", 3000);
    if (url.empty()) return;
    run.set_client_options({"--heartbeat-ms", std::to_string(heartbeat_ms), "--timeout-ms",
                            std::to_string(timeout_ms), "--chunk-timeout-ms", "1000"});
    Layout layout = random_layout(run);
    auto [pub_id, r1_id] = two_holders(run, url, layout);
    if (!pub_id || !r1_id) return;
    Child &r1 = *run.child("r1");
    sleep_ms(50);  // r1 waits for signals once it has said "ok"
    auto fault = Clock::now();
    r1.signal(SIGUSR1);
    run.mark_fault(fault, "a stray write into r1's shard 0");
    run.result.injected = true;
    int checkers = static_cast<int>(run.pick(1, 3));
    for (int i = 0; i < checkers; ++i) {
        Reader r = run.start_reader("checker" + std::to_string(i), url, layout, {}, "all");
        if (!run.settle(r, layout.version)) return;
    }
    auto withdrawn = [&] { return !holds_complete(server_status(url), layout.model, layout.version, r1_id, layout.shards); };
    auto checked = Clock::now();
    while (!withdrawn() && ms_between(checked, Clock::now()) < 2 * heartbeat_ms + timeout_ms) sleep_ms(20);
    if (!withdrawn()) {
        run.violation("r1 still holds every shard " + std::to_string(ms_between(checked, Clock::now())) +
                          " ms after readers checked it: it did not withdraw the changed replica",
                      &r1);
        return;
    }
    if (worker_named(server_status(url), "r1") == nullptr) run.violation("r1 is no longer registered", &r1);
    if (auto how = r1.ended()) run.violation("r1 ended (" + *how + ")", &r1);
    Reader trusting = run.start_reader("trusting", url, layout, {}, "off");
    run.settle(trusting, layout.version);
}

}  // namespace th_fault
