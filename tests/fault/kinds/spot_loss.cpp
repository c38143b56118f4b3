#include "kinds.hpp"

namespace th_fault {

// (7): spot capacity is reclaimed: most holders of a version (the publisher
// among them or not) are SIGKILLed at the same moment while slow readers read
// from them. The readers finish from the one survivor, the version stays
// fetchable, and the server forgets every lost worker when its lease ends.
void spot_loss(Run &run) {
    const uint32_t lease_ms = 3000;
    std::string url = run.start_server("server", lease_ms);
    if (url.empty()) return;
    run.set_client_options({"--heartbeat-ms", "200", "--timeout-ms", "2000", "--chunk-timeout-ms", "1000"});
    Layout layout = random_layout(run);
    if (!run.start_publisher(url, layout)) return;
    std::vector<Child *> holders = {run.child("publisher")};
    const int extra = static_cast<int>(run.pick(3, 5));
    for (int i = 0; i < extra; ++i) {
        Reader h = run.start_reader("holder" + std::to_string(i), url, layout, {true, 0});
        if (!run.settle(h, layout.version)) return;
        holders.push_back(h.child);
    }
    uint64_t delay_us = 0;
    std::vector<Reader> readers = start_slow_readers(run, url, layout, &delay_us);
    // Wait until the readers are spread over the holders, then strike.
    for (int i = 0; i < 500; ++i) {
        json s = server_status(url, 500);
        int serving = 0;
        for (Child *h : holders)
            if (const json *w = worker_named(s, h->name()); w && (*w)["active_reads"].get<uint64_t>() > 0) serving++;
        if (serving >= 2) break;
        sleep_ms(5);
    }
    sleep_random_part_of(run, layout.slow_fetch_ms(delay_us));

    Child *survivor = holders[run.pick(0, holders.size() - 1)];
    std::vector<std::string> lost;
    auto fault = Clock::now();
    for (Child *h : holders)
        if (h != survivor) {
            h->signal(SIGKILL);
            lost.push_back(h->name());
        }
    auto flying = Run::in_flight(readers);
    run.mark_fault(fault, "SIGKILL " + std::to_string(lost.size()) + " of " + std::to_string(holders.size()) +
                              " holders at once (" + survivor->name() + " survives) with " +
                              std::to_string(std::count(flying.begin(), flying.end(), true)) + " fetches in flight");
    for (const Reader &r : readers) run.settle(r, layout.version);
    run.measure_recovery(readers, flying, fault, 0);
    run.expect_available(url, layout, {survivor}, std::to_string(lost.size()) + " holders were lost at once");

    // The server must forget them all once their leases end (+ one lease
    // check period and some slack).
    auto still_known = [&] {
        json s = server_status(url, 1000);
        std::string names;
        for (const std::string &n : lost)
            if (worker_named(s, n)) names += (names.empty() ? "" : " ") + n;
        return names;
    };
    while (!still_known().empty() && ms_between(fault, Clock::now()) < lease_ms * 2 + 1000) sleep_ms(50);
    if (std::string left = still_known(); !left.empty())
        run.violation("the server still lists lost workers " + left + " " +
                      std::to_string(ms_between(fault, Clock::now())) + " ms after they died (lease " +
                      std::to_string(lease_ms) + " ms)");
}

}  // namespace th_fault
