#include "kinds.hpp"

namespace th_fault {

// (4): the publisher rewrites its buffers version after version (publish-loop:
// release v-2, overwrite, publish v) while slowed fetch-loop readers read;
// a reader must never return bytes of a rewritten buffer, nor mix versions
// across shards. Evidence that a rewrite hit a read: the readers' logs.
void mutation(Run &run) {
    std::string url = run.start_server("server", 3000);
    if (url.empty()) return;
    run.set_client_options({"--heartbeat-ms", "200", "--timeout-ms", "2000", "--chunk-timeout-ms", "1000"});
    Layout layout;
    layout.shards = static_cast<uint32_t>(run.pick(1, 3));
    layout.shard_kb = 1024;
    layout.tensors = 3;
    const uint64_t delay_ms = run.pick(2, 15), for_ms = run.pick(1200, 2000);
    // Versions enough to keep rewriting until the readers stop (a version
    // takes about shards x delay plus ~3 ms of filling and publishing).
    layout.version = std::min<uint64_t>(for_ms / (layout.shards * delay_ms + 3) + 20, 600);
    std::vector<std::string> args = {"publish-loop", "--server", url, "--shards", std::to_string(layout.shards)};
    args.insert(args.end(), {"--versions", std::to_string(layout.version), "--delay-ms", std::to_string(delay_ms),
                             "--chunk-kb", std::to_string(layout.chunk_kb)});
    auto sizes = layout.sizes();
    args.insert(args.end(), sizes.begin(), sizes.end());
    Child &pub = run.worker("publisher", args);
    sleep_ms(static_cast<int64_t>(run.pick(0, 300)));

    std::vector<Reader> readers;
    int n = static_cast<int>(run.pick(2, 3));
    for (int i = 0; i < n; ++i) {
        std::vector<std::string> rargs = {"fetch-loop", "--server", url, "--shards", std::to_string(layout.shards),
                                          "--for-ms", std::to_string(for_ms)};
        rargs.insert(rargs.end(), sizes.begin(), sizes.end());
        readers.push_back(
            run.watch(run.worker("loop" + std::to_string(i), rargs,
                                       {"TENSORHUB_FAULT_CHUNK_DELAY_US=" + std::to_string(run.pick(0, 800))})));
    }
    run.mark_fault(Clock::now(), "publish-loop of " + std::to_string(layout.version) + " versions x " +
                                     std::to_string(layout.shards) + " shards every " + std::to_string(delay_ms) +
                                     " ms under " + std::to_string(n) + " fetch-loop readers");
    size_t hits = 0, kept = 0;
    for (const Reader &r : readers) {
        Outcome o;
        if (run.settle(r, 0, &o)) run.result.completed += static_cast<int>(field(o.line, "fetched")) - 1;
        hits += r.child->log_count("its buffers changed while being read") +
                r.child->log_count("its buffers are being modified");
        kept += r.child->log_count("keeping what it sent before");  // guarded reads (tcp)
    }
    // Over tcp a spill of the rewritten version answers its readers' reads,
    // and they notice nothing: the publisher says so, once per spill.
    size_t answered = pub.log_count("its spilled copy answers its readers' reads");
    run.result.injected = hits + kept + answered > 0;
    run.result.fault += ": " + std::to_string(hits) + " reads hit a rewrite (" + std::to_string(kept) +
                        " kept what was sent), " + std::to_string(answered) + " answered by a spill";
    if (!run.loop_ended(pub, "the publisher")) return;
    run.expect_available(url, layout, {&pub}, "the last version of the loop");
}

}  // namespace th_fault
