#include "kinds.hpp"

namespace th_fault {

// (1) and (2): a source that serves slow readers dies (SIGKILL) or pauses
// beyond its lease (SIGSTOP, then SIGCONT). The victim is the publisher or the
// second complete holder r1, at random: the version survives either.
void holder_fault(Run &run, bool pause) {
    const uint32_t lease_ms = pause ? 1500 : 3000;
    std::string url = run.start_server("server", lease_ms);
    if (url.empty()) return;
    run.set_client_options({"--heartbeat-ms", "200", "--timeout-ms", "2000", "--chunk-timeout-ms", "1000"});
    Layout layout = random_layout(run);
    auto [pub_id, r1_id] = two_holders(run, url, layout);
    if (!pub_id || !r1_id) return;
    uint64_t delay_us = 0;
    std::vector<Reader> readers = start_slow_readers(run, url, layout, &delay_us);

    bool victim_is_pub = run.coin();
    Child &victim = *run.child(victim_is_pub ? "publisher" : "r1");
    const uint64_t victim_id = victim_is_pub ? pub_id : r1_id;
    Child *survivor = run.child(victim_is_pub ? "r1" : "publisher");
    bool serving = run.wait_serving(url, victim.name(), 5000) != 0;
    sleep_random_part_of(run, layout.slow_fetch_ms(delay_us));

    auto fault = Clock::now();
    victim.signal(pause ? SIGSTOP : SIGKILL);
    auto flying = Run::in_flight(readers);
    // Reads planned on the victim that had not ended when it stopped: on a
    // one-sided lane they go on from the paused holder's memory.
    bool reads_on_victim = Run::worker_field(url, victim.name(), "active_reads") > 0;
    run.mark_fault(fault, std::string(pause ? "SIGSTOP " : "SIGKILL ") + victim.name() +
                              (serving ? " while it served" : " (never seen serving)"));
    for (const Reader &r : readers) run.settle(r, layout.version);
    run.measure_recovery(readers, flying, fault, victim_id, pause && reads_on_victim);
    if (!pause) {
        run.expect_available(url, layout, {survivor}, victim.name() + " was killed");
        return;
    }
    // Past the lease the server has dropped the paused holder; the survivor
    // must serve alone. Then the paused one resumes and must register again
    // with its replica (it is told it is unknown and re-publishes).
    sleep_ms(lease_ms + static_cast<int64_t>(run.pick(200, 1000)) - ms_between(fault, Clock::now()));
    run.expect_available(url, layout, {survivor}, victim.name() + " is paused past its lease");
    victim.signal(SIGCONT);
    auto resumed = Clock::now();
    while (!holds_complete(server_status(url), layout.model, layout.version, victim_id, layout.shards) &&
           ms_between(resumed, Clock::now()) < 5000)
        sleep_ms(20);
    if (!holds_complete(server_status(url), layout.model, layout.version, victim_id, layout.shards))
        run.violation(victim.name() + " did not register its replica again within 5 s of SIGCONT", &victim);
    if (auto how = victim.ended()) {
        run.violation(victim.name() + " ended (" + *how + ") after SIGCONT", &victim);
        return;
    }
    // Registered is not enough: it must serve again, alone, from the address
    // it registered after the pause.
    survivor->signal(SIGKILL);
    run.expect_available(url, layout, {&victim}, victim.name() + " resumed and is the only holder left", 5000);
}

}  // namespace th_fault
