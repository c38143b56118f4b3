#include "kinds.hpp"

namespace th_fault {

// (5): control messages between every client and the server go through a
// TCP proxy that, for a short window, delays them, resets the connections or
// swallows them (then resets). A reader started inside the window does its
// whole control conversation (hello, resolve, plan) through the fault.
void control_faults(Run &run) {
    std::string url = run.start_server("server", 3000);
    if (url.empty()) return;
    TcpProxy &proxy = run.start_proxy(url);
    run.set_client_options({"--heartbeat-ms", "200", "--timeout-ms", "3000", "--chunk-timeout-ms", "1000"});
    Layout layout = random_layout(run);
    if (!run.start_publisher(proxy.url(), layout)) return;
    uint64_t delay_us = 0;
    std::vector<Reader> readers = start_slow_readers(run, proxy.url(), layout, &delay_us, /*serve=*/run.coin());
    run.wait_serving(url, "publisher", 5000);
    sleep_random_part_of(run, layout.slow_fetch_ms(delay_us));

    static const std::pair<TcpProxy::Mode, const char *> modes[] = {
        {TcpProxy::Mode::Delay, "delay"}, {TcpProxy::Mode::Reset, "reset"}, {TcpProxy::Mode::Drop, "drop"}};
    auto [mode, mode_name] = modes[run.pick(0, 2)];
    const int64_t window = static_cast<int64_t>(run.pick(200, 1000)), delay = static_cast<int64_t>(run.pick(50, 500));
    const uint64_t touched_before = proxy.touched();
    auto fault = Clock::now();
    proxy.fault(mode, Ms(window), Ms(delay));
    readers.push_back(run.start_reader("late", proxy.url(), layout, {}));
    auto flying = Run::in_flight(readers);
    run.mark_fault(fault,
                   std::string("proxy ") + mode_name + " for " + std::to_string(window) + " ms" +
                       (mode == TcpProxy::Mode::Delay ? " (+" + std::to_string(delay) + " ms per message)" : ""));
    for (const Reader &r : readers) run.settle(r, layout.version);
    run.measure_recovery(readers, flying, fault, 0);
    run.result.injected = proxy.touched() > touched_before;
    run.result.fault += ", " + std::to_string(proxy.touched() - touched_before) + " messages/connections hit";
    run.expect_available(proxy.url(), layout, {run.child("publisher")}, "after the proxy healed");
}

}  // namespace th_fault
