#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kinds.hpp"

namespace th_fault {

namespace {

// Opens a TCP connection to url's port and writes n random bytes into it.
void send_garbage(const std::string &url, Run &run, size_t n) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(std::stoul(url.substr(url.rfind(':') + 1))));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0) {
        std::string junk(n, '\0');
        for (char &c : junk) c = static_cast<char>(run.pick(0, 255));
        ssize_t w = write(fd, junk.data(), junk.size());
        (void)w;
    }
    close(fd);
}

}  // namespace

// (8) chaos: for `seconds`, a trainer publishes version after version while
// readers fetch LATEST in loops (half of them serving what they fetched, so
// they are sources too), and faults land at random every 0.3-2 s: SIGKILL of
// a reader or source (restarted under a new name), SIGSTOP of one for up to
// 1.8 s (past its chunk timeout, within its calls' deadline), a short SIGSTOP of the trainer, SIGKILL of the server the clients use
// (restarted as a standby on its port once the other has taken over),
// garbage on a server's port, and a stray write: a source flips a byte of
// what it serves behind the library's back (SIGUSR1). Readers check every
// chunk against the version's checksums. What must hold: no reader ever
// returns wrong or mixed bytes, no reader hangs or fails while holders live,
// and the trainer's last version is fetchable at the end.
//
// etcd: the two servers elect their leader in an etcd of the run's own and the
// clients follow it (server_url etcd://...); the server killed is the leader,
// restarted on its port to campaign again. Without: clients fail over along
// the list of the two, the killed one restarted as a standby. A list cannot
// tell a dead server from one a single worker could not reach: that worker
// moves alone to the other server, which takes over while the first still
// serves everyone else (docs/reliability.md, "Chaos").
void chaos(Run &run, int seconds, bool etcd) {
    const uint32_t lease = 3000;
    std::vector<std::string> etcd_args;
    std::string both;
    if (etcd) {
        std::string endpoint = run.start_etcd("etcd");
        if (endpoint.empty()) return;
        etcd_args = {"--etcd", endpoint, "--etcd-lease-ms", "2000"};
        both = "etcd://" + endpoint + "/tensorhub";
    }
    std::string urls[2] = {run.start_server("serverA0", lease, false, "tcp://127.0.0.1:0", etcd_args),
                           run.start_server("serverB0", lease, /*standby=*/!etcd, "tcp://127.0.0.1:0", etcd_args)};
    if (urls[0].empty() || urls[1].empty()) return;
    if (!etcd) both = urls[0] + "," + urls[1];
    // The server that answers (in etcd mode the other says it does not lead).
    auto leader = [&]() -> int {
        for (auto until = Clock::now() + Ms(15000); Clock::now() < until; sleep_ms(100))
            for (int k = 0; k < 2; ++k)
                if (server_status(urls[k], 500) != nullptr) return k;
        return -1;
    };
    if (etcd && leader() < 0) {
        run.violation("no server became the leader in etcd");
        return;
    }
    // In etcd mode a call must outlast a failover: noticing the dead leader
    // (half the timeout), etcd electing the next (its 2 s lease), registering.
    run.set_client_options(
        {"--heartbeat-ms", "200", "--timeout-ms", etcd ? "8000" : "2000", "--chunk-timeout-ms", "1000"});
    Layout layout;
    layout.shards = static_cast<uint32_t>(run.pick(1, 2));
    layout.shard_kb = 2048;
    layout.tensors = 3;
    const uint64_t delay_ms = 40;
    const int64_t total_ms = int64_t{seconds} * 1000;
    // As many versions as fit, the loop bounded by time: pauses and failovers
    // slow it by an amount nobody can know in advance.
    layout.version = 1'000'000;
    auto sizes = layout.sizes();
    std::vector<std::string> targs = {"publish-loop", "--server", both, "--shards", std::to_string(layout.shards),
                                      "--versions", std::to_string(layout.version), "--delay-ms",
                                      std::to_string(delay_ms), "--chunk-kb", std::to_string(layout.chunk_kb),
                                      "--for-ms", std::to_string(total_ms)};
    targs.insert(targs.end(), sizes.begin(), sizes.end());
    Child &trainer = run.worker("trainer", targs);

    auto t0 = Clock::now();
    auto end = t0 + Ms(total_ms);
    struct Slot {
        Reader reader;
        bool serve;
        int generation = 0;
        bool killed = false;
        Clock::time_point started;
    };
    auto start_loop = [&](int i, Slot &slot) {
        int64_t left = std::max<int64_t>(ms_between(Clock::now(), end), 500);
        std::vector<std::string> rargs = {"fetch-loop", "--server", both, "--shards", std::to_string(layout.shards),
                                          "--for-ms", std::to_string(left)};
        rargs.insert(rargs.end(), sizes.begin(), sizes.end());
        if (slot.serve) rargs.push_back("--serve");
        rargs.insert(rargs.end(), {"--verify", "all"});  // stray writes are caught, never returned
        std::string name = "loop" + std::to_string(i) + "-" + std::to_string(slot.generation++);
        slot.reader = run.watch(run.worker(name, rargs), static_cast<int>(left));
        slot.killed = false;
        slot.started = Clock::now();
    };
    std::vector<Slot> slots(4);
    for (int i = 0; i < 4; ++i) {
        slots[i].serve = i % 2 == 0;
        start_loop(i, slots[i]);
    }
    std::vector<Reader> finished;  // killed readers are not judged; the others are
    int active = 0;                // index into urls: the server the clients use
    std::string names[2] = {"serverA0", "serverB0"};
    auto last_server_kill = Clock::now();
    std::map<std::string, int> counts;
    while (Clock::now() + Ms(1500) < end) {
        sleep_ms(static_cast<int64_t>(run.pick(300, 2000)));
        int what = static_cast<int>(run.pick(0, 10));
        int i = static_cast<int>(run.pick(0, 3));
        Slot &slot = slots[i];
        if (what <= 2) {  // kill a reader or a source, then replace it
            slot.reader.child->signal(SIGKILL);  // marks it as killed on purpose
            counts[slot.serve ? "SIGKILL source" : "SIGKILL reader"]++;
            start_loop(i, slot);
        } else if (what <= 4) {  // pause a reader or a source
            // Past its chunk timeout (it starts a fresh UCX worker), but within
            // its calls' deadline: a call whose deadline passes while its
            // process is stopped fails with TH_ERR_TIMEOUT, rightly.
            slot.reader.child->signal(SIGSTOP);
            sleep_ms(static_cast<int64_t>(run.pick(100, 1800)));
            slot.reader.child->signal(SIGCONT);
            counts[slot.serve ? "SIGSTOP source" : "SIGSTOP reader"]++;
        } else if (what == 5) {  // the trainer stalls, within its lease
            trainer.signal(SIGSTOP);
            sleep_ms(static_cast<int64_t>(run.pick(50, 1000)));
            trainer.signal(SIGCONT);
            counts["SIGSTOP trainer"]++;
        } else if (what == 6 && Clock::now() - last_server_kill > Ms(6000)) {
            // Kill the server in use; the other takes over. The dead one comes
            // back on its port (a standby, or a candidate in etcd), for the
            // next kill to fall back on.
            if (etcd && (active = leader()) < 0) {
                run.violation("no server leads in etcd");
                return;
            }
            Child *victim = run.server(names[active]);
            if (victim == nullptr) continue;
            victim->signal(SIGKILL);
            counts["server kill"]++;
            sleep_ms(static_cast<int64_t>(lease));
            names[active] = std::string(active == 0 ? "serverA" : "serverB") + std::to_string(counts["server kill"]);
            if (run.start_server(names[active], lease, /*standby=*/!etcd, urls[active], etcd_args).empty()) return;
            active = 1 - active;
            last_server_kill = Clock::now();
        } else if (what == 10) {  // a source's served bytes change behind the library's back
            // Not a process just started: before its handler is in, the
            // signal would end it.
            Slot &source = slots[2 * run.pick(0, 1)];
            if (Clock::now() - source.started < Ms(2000)) continue;
            source.reader.child->signal(SIGUSR1);
            counts["stray write"]++;
        } else {  // garbage on a server's port
            send_garbage(urls[run.pick(0, 1)], run, static_cast<size_t>(run.pick(1, 4096)));
            counts["garbage"]++;
        }
    }
    std::string what;
    int faults = 0;
    for (auto &[k, n] : counts) {
        what += (what.empty() ? "" : ", ") + std::to_string(n) + " " + k;
        faults += n;
    }
    run.mark_fault(t0, std::to_string(seconds) + " s of chaos: " + what);
    run.result.faults = faults;
    run.result.injected = faults > 0;
    // Every reader still up must finish its loop cleanly.
    for (Slot &slot : slots) {
        Outcome o;
        if (run.settle(slot.reader, 0, &o)) run.result.completed += static_cast<int>(field(o.line, "fetched")) - 1;
    }
    if (!run.loop_ended(trainer, "the trainer", &layout.version)) return;
    run.expect_available(both, layout, {&trainer}, "the trainer's last version after the chaos", 10000);
}

}  // namespace th_fault
