#include "kinds.hpp"

namespace th_fault {

// (6): a serving reader A, slowed, is SIGKILLed mid-fetch while followers
// read A's filling replica one hop behind it; they must finish elsewhere.
void reader_kill(Run &run) {
    std::string url = run.start_server("server", 3000);
    if (url.empty()) return;
    run.set_client_options({"--heartbeat-ms", "200", "--timeout-ms", "2000", "--chunk-timeout-ms", "1000"});
    Layout layout = random_layout(run);
    if (!run.start_publisher(url, layout)) return;
    // A fetches for 1.5-3 s: long enough for followers (processes started
    // after A reads) to plan on it and for the kill to find it mid-fetch.
    const uint64_t a_delay = layout.delay_for_ms(run.pick(1500, 3000));
    Reader a = run.start_reader("A", url, layout, {true, a_delay});
    // A registers its filling replica with its plan, so once A reads from
    // the publisher, followers are routed to A (an idle source beats a busy one).
    run.wait_serving(url, "publisher", 5000);
    std::vector<Reader> followers;
    int n = static_cast<int>(run.pick(1, 2));
    for (int i = 0; i < n; ++i) followers.push_back(run.start_reader("follower" + std::to_string(i), url, layout, {}));
    bool followed = run.wait_serving(url, "A", 5000) != 0;
    const uint64_t a_id = Run::worker_field(url, "A", "worker_id");
    sleep_random_part_of(run, layout.slow_fetch_ms(a_delay));

    const bool a_fetching = a.in_flight();
    auto fault = Clock::now();
    a.child->signal(SIGKILL);
    auto flying = Run::in_flight(followers);
    run.mark_fault(fault, std::string("SIGKILL reader A mid-fetch") +
                              (followed ? " while followed" : " (never seen followed)") +
                              (a_fetching ? "" : ", but A had already finished"));
    for (const Reader &r : followers) run.settle(r, layout.version);
    run.measure_recovery(followers, flying, fault, a_id);
    run.expect_available(url, layout, {run.child("publisher")}, "reader A was killed");
}

}  // namespace th_fault
