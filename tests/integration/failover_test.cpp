// Failures of holders, readers and servers with real processes: a source
// killed or paused mid-transfer, holders back from a pause or a lost lease,
// and a server that dies while a standby takes over (epochs fence the old).
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "harness.hpp"

using namespace th_test;

namespace {

// A publisher and a second complete holder (r1), then a slowed reader that
// starts on r1 (it served nothing yet, the publisher did). Returns r1's
// worker id and leaves the slow reader mid-read.
struct FailoverSetup {
    ServerGuard srv;
    std::unique_ptr<Process> pub, r1, slow;
    uint64_t r1_id = 0;
    FailoverSetup() {
        pub = std::make_unique<Process>(worker({"publish", "--server", srv.url, "--name", "publisher", "--model", "f",
                                             "--shard-kb", "16384", "--tensors", "4", "--chunk-kb", "64"}));
        EXPECT_EQ(pub->line().rfind("ready", 0), 0u);
        r1 = std::make_unique<Process>(worker({"fetch", "--server", srv.url, "--name", "r1", "--model", "f", "--shard-kb",
                                            "16384", "--tensors", "4", "--heartbeat-ms", "200"}));
        std::string l = r1->line();
        EXPECT_EQ(l.rfind("ok", 0), 0u) << l;
        r1_id = field(l, "worker");
        slow = std::make_unique<Process>(worker({"fetch", "--server", srv.url, "--name", "slow", "--model", "f", "--shard-kb",
                                              "16384", "--tensors", "4", "--no-serve", "--chunk-timeout-ms", "1000"},
                                             {"TENSORHUB_FAULT_CHUNK_DELAY_US=3000"}));
        // Wait until it reads from r1.
        EXPECT_TRUE(eventually(srv.url, [&](const nlohmann::json &s) {
            for (const auto &w : s["workers"])
                if (w["worker_id"].get<uint64_t>() == r1_id && w["active_reads"].get<int>() > 0) return true;
            return false;
        }));
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
};

}  // namespace

TEST(Failover, SourceKilledMidTransferTheReaderFinishesFromAnotherReplica) {
    FailoverSetup f;
    auto t0 = Clock::now();
    kill(f.r1->pid(), SIGKILL);
    std::string l = f.slow->line(30000);
    EXPECT_EQ(l.rfind("ok", 0), 0u) << l;  // every byte checked by the worker
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(20));
}

TEST(Failover, PausedSourceIsTreatedAsDeadAndRejoinsOnlyByRegisteringAgain) {
    FailoverSetup f;
    kill(f.r1->pid(), SIGSTOP);
    std::string l = f.slow->line(30000);
    EXPECT_EQ(l.rfind("ok", 0), 0u) << l;
    // Reported unreachable: not routed to while paused.
    auto r1_holds = [&](const nlohmann::json &s) { return holds_complete(s, "f", 1, f.r1_id); };
    kill(f.r1->pid(), SIGCONT);
    // Back: its next heartbeat is refused, it registers again with its replica.
    EXPECT_TRUE(eventually(f.srv.url, r1_holds, 10000)) << server_status(f.srv.url).dump(1);
    // And it serves again: with the publisher gone, r1 is the only holder.
    kill(f.pub->pid(), SIGKILL);
    Process again(worker({"fetch", "--server", f.srv.url, "--name", "again", "--model", "f", "--shard-kb", "16384",
                       "--tensors", "4", "--no-serve"}));
    std::string l2 = again.line(30000);
    EXPECT_EQ(l2.rfind("ok", 0), 0u) << l2;
    EXPECT_EQ(f.r1->stop(), 0) << "the resumed holder did not keep running";
}

TEST(Failover, AHolderPausedPastItsChunkTimeoutRestartsAndServesAgain) {
    ServerGuard srv;
    Process pub(worker({"publish", "--server", srv.url, "--name", "publisher", "--model", "h", "--shard-kb", "4096"}));
    ASSERT_EQ(pub.line().rfind("ready", 0), 0u);
    Process r1(worker({"fetch", "--server", srv.url, "--name", "r1", "--model", "h", "--shard-kb", "4096",
                    "--chunk-timeout-ms", "1000", "--heartbeat-ms", "200"}));
    std::string l = r1.line();
    ASSERT_EQ(l.rfind("ok", 0), 0u) << l;
    // Paused past its chunk timeout: on resuming it sets its UCX worker aside,
    // starts a new one and registers the new address with its replica (within
    // milliseconds: its progress thread sees the gap at once).
    kill(r1.pid(), SIGSTOP);
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    kill(r1.pid(), SIGCONT);
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    // With the publisher gone r1 is the only holder: a new reader must reach
    // it at its new address.
    kill(pub.pid(), SIGKILL);
    Process again(worker({"fetch", "--server", srv.url, "--name", "again", "--model", "h", "--shard-kb", "4096",
                       "--no-serve", "--chunk-timeout-ms", "1000"}));
    std::string l2 = again.line(30000);
    EXPECT_EQ(l2.rfind("ok", 0), 0u) << l2;
    EXPECT_EQ(r1.stop(), 0) << "the resumed holder did not keep running";
}

TEST(Failover, AHolderResumedPastItsLeaseRegistersOnceAndItsReplicaStaysListed) {
    th_server *server = start_server(nullptr, /*http=*/true, /*lease_ms=*/1000);
    std::string url = th_server_url(server), metrics = th_server_metrics_url(server);
    Process pub(worker({"publish", "--server", url, "--name", "publisher", "--model", "q", "--shard-kb", "1024"}));
    ASSERT_EQ(pub.line().rfind("ready", 0), 0u);
    Process r1(worker({"fetch", "--server", url, "--name", "r1", "--model", "q", "--shard-kb", "1024",
                    "--chunk-timeout-ms", "500", "--heartbeat-ms", "100"}));
    std::string l = r1.line();
    ASSERT_EQ(l.rfind("ok", 0), 0u) << l;
    uint64_t r1_id = std::stoull(l.substr(l.find("worker=") + 7));
    auto r1_listed = [&] { return holds_complete(server_status(url), "q", 1, r1_id); };
    auto hellos = [&](const char *kind) {
        std::string text = http_get(metrics), key = std::string("tensorhub_registrations_total{kind=\"") + kind + "\"} ";
        size_t at = text.find(key);
        return at == std::string::npos ? -1 : std::stoi(text.substr(at + key.size()));
    };
    int new_before = hellos("new");
    // Paused past its lease (the server drops it) and its chunk timeout (its
    // UCX worker is set aside). On resuming, its heartbeat finds it unknown
    // and its progress thread restarts UCX: it must say Hello once, with the
    // new address, and its replica must not vanish again once listed (a
    // second Hello would make the server forget it until re-declared).
    kill(r1.pid(), SIGSTOP);
    std::this_thread::sleep_for(std::chrono::milliseconds(1800));
    ASSERT_FALSE(r1_listed()) << "the server still lists the paused holder past its lease";
    kill(r1.pid(), SIGCONT);
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
    bool listed = false;
    while (std::chrono::steady_clock::now() < until) {
        bool now = r1_listed();
        EXPECT_FALSE(listed && !now) << "r1's replica was listed, then gone again";
        listed = listed || now;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_TRUE(listed) << "r1 did not declare its replica again: " << server_status(url).dump(1);
    EXPECT_EQ(hellos("new") - new_before, 1) << http_get(metrics);
    EXPECT_EQ(hellos("again"), 0) << http_get(metrics);
    // It serves from its new address.
    kill(pub.pid(), SIGKILL);
    Process after(worker({"fetch", "--server", url, "--name", "after", "--model", "q", "--shard-kb", "1024", "--no-serve"}));
    std::string l2 = after.line(30000);
    EXPECT_EQ(l2.rfind("ok", 0), 0u) << l2;
    EXPECT_EQ(r1.stop(), 0);
    th_server_destroy(server);
}

TEST(Failover, AHolderBackFromALostLeaseDeclaresWhatTheServerStillWants) {
    th_server *server = start_server(nullptr, /*http=*/false, /*lease_ms=*/1000);
    std::string url = th_server_url(server);
    // It holds versions 1 and 2. Past its lease the server drops it and
    // forgets version 1 (no holder left, not the latest).
    Process pub(worker({"publish-loop", "--server", url, "--name", "publisher", "--model", "o", "--shard-kb", "256",
                     "--versions", "2", "--delay-ms", "0", "--heartbeat-ms", "100"}));
    ASSERT_EQ(pub.line().rfind("ready", 0), 0u);
    kill(pub.pid(), SIGSTOP);
    std::this_thread::sleep_for(std::chrono::milliseconds(1800));
    kill(pub.pid(), SIGCONT);
    // Back, it declares both again: version 1 is refused (older than the
    // latest, and forgotten), which must not keep version 2 undeclared.
    bool listed = eventually(url, [](const nlohmann::json &s) { return holds_complete(s, "o", 2); }, 5000);
    EXPECT_TRUE(listed) << server_status(url).dump(1);
    Process r(worker({"fetch", "--server", url, "--name", "r", "--model", "o", "--shard-kb", "256", "--no-serve"}));
    std::string l = r.line(30000);
    EXPECT_NE(l.find("version=2"), std::string::npos) << l;
    EXPECT_EQ(pub.stop(), 0);
    th_server_destroy(server);
}

TEST(Failover, AReaderPausedMidFetchStartsAfreshAndBlamesNoSource) {
    th_server *server = start_server(nullptr, /*http=*/true);
    std::string url = th_server_url(server), metrics = th_server_metrics_url(server);
    Process pub(worker({"publish", "--server", url, "--name", "publisher", "--model", "p", "--shard-kb", "16384",
                     "--tensors", "4", "--chunk-kb", "64"}));
    ASSERT_EQ(pub.line().rfind("ready", 0), 0u);
    // 256 chunks at 10 ms each: the fetch takes seconds.
    Process slow(worker({"fetch", "--server", url, "--name", "slow", "--model", "p", "--shard-kb", "16384", "--tensors", "4",
                      "--no-serve", "--chunk-timeout-ms", "1000", "--heartbeat-ms", "200"},
                     {"TENSORHUB_FAULT_CHUNK_DELAY_US=10000"}));
    EXPECT_TRUE(eventually(url, [&](const nlohmann::json &s) {
        for (const auto &w : s["workers"])
            if (w["name"] == "publisher" && w["active_reads"].get<int>() > 0) return true;
        return false;
    }));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    kill(slow.pid(), SIGSTOP);
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // past its chunk timeout
    kill(slow.pid(), SIGCONT);
    // Its GETs were dropped with the paused UCX worker; it reads the rest
    // again and checks every byte.
    std::string l = slow.line(30000);
    EXPECT_EQ(l.rfind("ok", 0), 0u) << l;
    // The publisher did nothing wrong: it was never reported.
    std::string text = http_get(metrics);
    EXPECT_NE(text.find("tensorhub_failures_total{kind=\"source_failed\"} 0"), std::string::npos) << text;
    EXPECT_EQ(pub.stop(), 0);
    th_server_destroy(server);
}

namespace {

// A primary and a standby listed after it; new clients start on the primary
// (the newer epoch).
struct PrimaryAndStandby {
    ServerProc standby{true};
    ServerProc primary = [] {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the primary gets the newer epoch
        return ServerProc();
    }();
    std::string both = primary.url + "," + standby.url;
};

// A publish-loop trainer whose log (stderr) goes to a file: the tests read
// its failovers. Heartbeats every 100 ms.
struct LoggedTrainer {
    std::string log_path = [] {
        char path[] = "/tmp/th_failover_log.XXXXXX";
        int fd = mkstemp(path);
        EXPECT_GE(fd, 0);
        close(fd);
        return std::string(path);
    }();
    Process proc;
    LoggedTrainer(const std::string &servers, const std::string &model, const std::string &for_ms,
                  const std::string &timeout_ms)
        : proc(command(servers, model, for_ms, timeout_ms, log_path)) {}
    ~LoggedTrainer() { std::remove(log_path.c_str()); }
    std::string log() const {
        std::ifstream in(log_path);
        return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    }
    static std::vector<std::string> command(const std::string &servers, const std::string &model,
                                            const std::string &for_ms, const std::string &timeout_ms,
                                            const std::string &log_path) {
        std::string cmd = "exec";
        for (const std::string &a : worker({"publish-loop", "--server", servers, "--name", "trainer", "--model", model,
                                            "--versions", "1000000", "--shards", "1", "--shard-kb", "64", "--delay-ms",
                                            "20", "--for-ms", for_ms, "--heartbeat-ms", "100", "--timeout-ms", timeout_ms}))
            cmd += " " + a;
        return {"/bin/sh", "-c", cmd + " 2>" + log_path};
    }
};

}  // namespace

TEST(Failover, ServerDiesTheNextTakesOverAndAStaleServerIsFenced) {
    ServerProc a, b;
    const std::string both = a.url + "," + b.url;
    const std::vector<std::string> fast = {"--heartbeat-ms", "200", "--timeout-ms", "1500"};
    auto with = [&](std::vector<std::string> args) {
        args.insert(args.end(), fast.begin(), fast.end());
        return worker(args);
    };
    Process pub(with({"publish", "--server", both, "--name", "trainer", "--model", "ha", "--shard-kb", "2048"}));
    ASSERT_EQ(pub.line().rfind("ready", 0), 0u);
    auto fetch_ok = [&](const std::string &name) {
        // Retries while the trainer has not yet registered with the new server.
        for (int i = 0; i < 40; ++i) {
            Process r(with({"fetch", "--server", both, "--name", name, "--model", "ha", "--shard-kb", "2048", "--no-serve", "--exit"}));
            std::string l = r.line(30000);
            if (l.rfind("ok", 0) == 0) return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(250));
        }
        return false;
    };
    ASSERT_TRUE(fetch_ok("before"));

    // Clients start on the server with the newest epoch: `used` below.
    ServerProc &used = a.epoch() > b.epoch() ? a : b, &other = &used == &a ? b : a;
    auto registered = [](ServerProc &srv, const std::string &name) {
        nlohmann::json s = server_status(srv.url);
        for (const auto &w : s["workers"])
            if (w["name"] == name) return true;
        return false;
    };
    ASSERT_TRUE(registered(used, "trainer"));

    // It pauses: the trainer's heartbeat times out, it moves to the other
    // server and declares its replica there, which takes over above the
    // paused server's epoch.
    uint64_t paused_epoch = used.epoch();
    kill(used.proc.pid(), SIGSTOP);
    EXPECT_TRUE(fetch_ok("during"));
    EXPECT_GT(other.epoch(), paused_epoch);
    // It comes back stale: new clients pick the newer server, the trainer
    // stays there, and the stale one forgets the trainer when its lease ends.
    kill(used.proc.pid(), SIGCONT);
    EXPECT_TRUE(fetch_ok("after-resume"));
    EXPECT_TRUE(registered(other, "trainer"));
    EXPECT_TRUE(eventually(used.url, [](const nlohmann::json &s) {
        for (const auto &w : s["workers"])
            if (w["name"] == "trainer") return false;
        return true;
    }));

    // The new leader dies for good: everyone goes round the list to the
    // server that was stale, which takes over above the dead one's epoch.
    uint64_t leader_epoch = other.epoch();
    kill(other.proc.pid(), SIGKILL);
    EXPECT_TRUE(fetch_ok("after-leader-died"));
    EXPECT_GT(used.epoch(), leader_epoch);
    EXPECT_TRUE(registered(used, "trainer"));
    EXPECT_EQ(pub.stop(), 0);
}

// A reader that starts while the server is dead and reaches the standby
// before any holder has failed over to it: the standby cannot tell "unknown"
// from "not re-declared yet", so the reader asks again until the trainer has
// re-registered there, instead of being told the model does not exist.
TEST(Failover, ANewReaderReachingTheStandbyFirstWaitsForTheHolders) {
    PrimaryAndStandby servers;
    auto &[standby, primary, both] = servers;
    ASSERT_GT(primary.epoch(), standby.epoch());
    // The trainer notices the dead server only after its 1.5 s timeout.
    Process pub(worker({"publish", "--server", both, "--name", "trainer", "--model", "sb", "--shard-kb", "1024",
                     "--heartbeat-ms", "300", "--timeout-ms", "1500"}));
    ASSERT_EQ(pub.line().rfind("ready", 0), 0u);
    const uint64_t before = standby.epoch();
    kill(primary.proc.pid(), SIGKILL);
    Process r(worker({"fetch", "--server", standby.url, "--name", "newcomer", "--model", "sb", "--shard-kb", "1024",
                   "--no-serve", "--exit", "--timeout-ms", "10000"}));
    std::string l = r.line(30000);
    EXPECT_EQ(l.rfind("ok", 0), 0u) << l;
    EXPECT_GT(standby.epoch(), before);  // it took over when the trainer came
    EXPECT_EQ(pub.stop(), 0);
}

// After a takeover, a version committed under the dead server is committed
// again even when only one of its two shards is declared again (the
// publisher had let the other go): its reader of the missing shard hears
// "no live holder", as before the takeover, not "not committed".
TEST(Failover, AVersionCommittedBeforeATakeoverStaysCommittedWithAShardGone) {
    PrimaryAndStandby servers;
    auto &[standby, primary, both] = servers;
    const uint64_t kBytes = 256 << 10;
    th_client *pub = connect(both, "trainer", 1500);
    th_client *rd = connect(both, "reader", 1500);
    Shard v1s0(2, kBytes, 1, 0), v1s1(2, kBytes, 1, 1), v2s0(2, kBytes, 2, 0), v2s1(2, kBytes, 2, 1);
    th_replica *p10 = nullptr, *p11 = nullptr, *p20 = nullptr, *p21 = nullptr, *held = nullptr;
    ASSERT_EQ(publish(pub, "two", 1, 0, 2, v1s0, &p10), TH_OK) << th_last_error();
    ASSERT_EQ(publish(pub, "two", 1, 1, 2, v1s1, &p11), TH_OK) << th_last_error();
    Shard got(2, kBytes);
    ASSERT_EQ(fetch(rd, "two", 1, 0, got, nullptr, &held), TH_OK) << th_last_error();
    ASSERT_EQ(publish(pub, "two", 2, 0, 2, v2s0, &p20), TH_OK) << th_last_error();
    ASSERT_EQ(publish(pub, "two", 2, 1, 2, v2s1, &p21), TH_OK) << th_last_error();
    // Version 1 is no longer the newest: the trainer lets it go; only the
    // reader's copy of shard 0 is left.
    ASSERT_EQ(th_replica_release(p10), TH_OK) << th_last_error();
    ASSERT_EQ(th_replica_release(p11), TH_OK) << th_last_error();

    kill(primary.proc.pid(), SIGKILL);
    // Both clients move to the standby (heartbeats) and declare what they hold.
    auto declared = [&](const nlohmann::json &s) {
        int holders = 0;
        for (const auto &w : s["workers"])
            if (w["name"] == "reader" || w["name"] == "trainer") holders++;
        return holders == 2;
    };
    ASSERT_TRUE(eventually(standby.url, declared));
    th_client *late = connect(both, "late", 1500);
    Shard s0(2, kBytes), s1(2, kBytes);
    EXPECT_EQ(fetch(late, "two", 1, 0, s0), TH_OK) << th_last_error();
    EXPECT_EQ(s0.first_wrong(1, 0), -1);
    EXPECT_ERROR(fetch(late, "two", 1, 1, s1), TH_ERR_UNAVAILABLE, "no live holder");
    EXPECT_EQ(fetch(late, "two", 2, 1, s1), TH_OK) << th_last_error();  // the newest is whole
    for (th_replica *r : {held, p20, p21}) th_replica_release(r);
    for (th_client *c : {late, rd, pub}) th_client_destroy(c);
}

// A reader's report of chunks that do not match their checksums lives in the
// server's memory until the holder's next heartbeat. The server dies in
// between: the reader tells the server it moves to again, which keeps the
// report until the holder declares the replica there, and then asks the
// holder to check it (which finds it corrupt and withdraws it). Before, the
// new server routed readers to the replica again.
TEST(Failover, AChecksumMismatchReportedJustBeforeATakeoverStillReachesItsHolder) {
    PrimaryAndStandby servers;
    auto &[standby, primary, both] = servers;
    th_client_config cc;
    th_client_config_init(&cc, sizeof cc);
    cc.server_url = both.c_str();
    cc.worker_name = "holder";
    cc.timeout_ms = 1500;
    cc.heartbeat_ms = 600;  // the report has time to be lost before the holder hears of it
    th_client *holder = nullptr;
    ASSERT_EQ(th_client_create(&holder, &cc), TH_OK) << th_last_error();
    th_client *rd = connect(both, "reader", 1500);
    const uint64_t kBytes = 256 << 10;
    Shard v1(2, kBytes, 1, 0);
    th_replica *rep = nullptr;
    ASSERT_EQ(publish(holder, "bad", 1, 0, 1, v1, &rep), TH_OK) << th_last_error();
    v1.data[1][1000] ^= 0x40;  // behind the library's back

    Shard got(2, kBytes);
    ASSERT_NE(fetch(rd, "bad", 1, 0, got, nullptr, nullptr, 3000, TH_VERIFY_ALL), TH_OK) << "the only holder is corrupt";
    kill(primary.proc.pid(), SIGKILL);

    auto end = Clock::now() + std::chrono::seconds(15);
    while (!th_replica_withdrawn(rep) && Clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_TRUE(th_replica_withdrawn(rep)) << "the holder was never asked to check its copy";
    th_replica_release(rep);
    for (th_client *c : {rd, holder}) th_client_destroy(c);
}

// A worker stopped (SIGSTOP, a debugger) while its call waits on a slow
// server comes back after the call's time: the answer is in its socket, and
// its timer fires late. That is no sign of a dead server. Failing over would
// make the standby take over while the primary still serves everyone else,
// splitting the workers between two servers; the worker asks the primary
// again instead.
TEST(Failover, AWorkerStoppedDuringACallDoesNotFailOverFromALiveServer) {
    PrimaryAndStandby servers;
    auto &[standby, primary, both] = servers;
    ASSERT_GT(primary.epoch(), standby.epoch());
    // Heartbeats every 100 ms; with two servers a call tries one for at most
    // half its 2 s timeout.
    Process pub(worker({"publish", "--server", both, "--name", "trainer", "--model", "pz", "--shard-kb", "1024",
                     "--heartbeat-ms", "100", "--timeout-ms", "2000"}));
    ASSERT_EQ(pub.line().rfind("ready", 0), 0u);
    const uint64_t standby_epoch = standby.epoch();
    for (int i = 0; i < 3; ++i) {
        kill(primary.proc.pid(), SIGSTOP);  // the trainer's next heartbeat waits on it
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        kill(pub.pid(), SIGSTOP);
        kill(primary.proc.pid(), SIGCONT);  // it answers into the stopped worker's socket
        std::this_thread::sleep_for(std::chrono::milliseconds(1300));  // past the 1 s the call had
        kill(pub.pid(), SIGCONT);
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    EXPECT_EQ(standby.epoch(), standby_epoch) << "the standby took over from a live primary";
    nlohmann::json s = server_status(primary.url);
    bool listed = false;
    for (const auto &w : s["workers"]) listed |= w["name"] == "trainer";
    EXPECT_TRUE(listed) << s.dump(1);
    EXPECT_EQ(pub.stop(), 0);
}

// A worker's calls to the server in use time out although that server is
// alive (here it answers heartbeats 1.5 s late, and with two servers a call
// tries one for at most half its 2 s timeout). The worker fails over to the
// standby, and its Hello there would make the standby take over while the
// primary still serves everyone else, splitting the workers between two
// servers. The standby first asks the server the worker left (Hello.left_url):
// it answers, so the standby refuses and the worker goes back.
TEST(Failover, AStandbyDoesNotTakeOverFromAServerThatStillAnswers) {
    ServerProc standby(true);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the primary gets the newer epoch
    ServerProc primary(false, {"TENSORHUB_FAULT_HEARTBEAT_DELAY_US=1500000"});
    ASSERT_GT(primary.epoch(), standby.epoch());
    const uint64_t standby_epoch = standby.epoch();
    const std::string both = primary.url + "," + standby.url;
    LoggedTrainer pub(both, "gb", "5000", "2000");
    // Meanwhile (its heartbeats timing out) everyone can still use the
    // primary: a reader given both servers fetches the trainer's versions.
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    Process reader(worker({"fetch-loop", "--server", both, "--name", "reader", "--model", "gb", "--shards", "1",
                           "--shard-kb", "64", "--for-ms", "1000", "--timeout-ms", "4000"}));
    std::string l = reader.line(30000);
    EXPECT_EQ(l.rfind("ok ", 0), 0u) << l;
    // The loop publishes for 5 s; a publish that fails ends it with "error ...".
    l = pub.proc.line(30000);
    EXPECT_EQ(l.rfind("ready", 0), 0u) << l;
    EXPECT_EQ(standby.epoch(), standby_epoch) << "the standby took over from a live primary";
    EXPECT_EQ(reader.stop(), 0);
    EXPECT_EQ(pub.proc.stop(), 0);
    const std::string log = pub.log();
    // The fault hit: the worker failed over, was refused and went back.
    EXPECT_NE(log.find("failing over to " + standby.url), std::string::npos) << log;
    EXPECT_NE(log.find("going back to " + primary.url), std::string::npos) << log;
}

// The server in use dies; the workers fail over to a standby restarted
// before, whose epoch is older than what they saw. A worker's Hello makes it
// take over, but a call of another of the worker's threads (heartbeat,
// publish) may reach the standby first and be answered with the old epoch
// (the standby here answers every Hello 700 ms late to make that certain).
// The worker must stay and say Hello again, not go back to the dead server.
TEST(Failover, AnAnswerOlderThanItsHelloDoesNotSendAWorkerBackToTheDeadServer) {
    ServerProc standby(true, {"TENSORHUB_FAULT_HELLO_DELAY_US=700000"});
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the primary gets the newer epoch
    ServerProc primary;
    ASSERT_GT(primary.epoch(), standby.epoch());
    const std::string both = primary.url + "," + standby.url;
    LoggedTrainer pub(both, "hl", "6000", "6000");
    // Once (CI, 2 cores, 2 tests at once) version 3 was not there within
    // 10 s; the trainer's log says what it was doing.
    ASSERT_TRUE(eventually(primary.url, [](const nlohmann::json &s) { return !version_status(s, "hl", 3).is_null(); }))
        << "the trainer's log:\n" << pub.log() << "\nthe primary's status:\n" << server_status(primary.url).dump(1);
    kill(primary.proc.pid(), SIGKILL);
    // The loop publishes through the failover for 6 s; a publish that fails
    // ends it with "error ...".
    std::string l = pub.proc.line(30000);
    EXPECT_EQ(l.rfind("ready", 0), 0u) << l;
    nlohmann::json st = server_status(standby.url);
    bool listed = false;
    for (const auto &w : st["workers"]) listed |= w["name"] == "trainer";
    EXPECT_TRUE(listed) << st.dump(1);
    EXPECT_EQ(pub.proc.stop(), 0);
    const std::string log = pub.log();
    // It moved to the standby once, and never back to the dead server.
    EXPECT_NE(log.find("failing over to " + standby.url), std::string::npos) << log;
    EXPECT_EQ(log.find("failing over to " + primary.url), std::string::npos) << log;
}

// The server in use dies for good and its port refuses. A worker whose call
// waits on it moves to the next server as soon as it sees no connection to
// it, not when the call's attempt runs out (half its 60 s timeout here).
TEST(Failover, AWorkerLeavesAServerWithNoConnectionWithoutWaitingOutItsCall) {
    PrimaryAndStandby servers;
    auto &[standby, primary, both] = servers;
    ASSERT_GT(primary.epoch(), standby.epoch());
    LoggedTrainer pub(both, "gone", "8000", "60000");
    ASSERT_TRUE(eventually(primary.url, [](const nlohmann::json &s) { return !version_status(s, "gone", 2).is_null(); }))
        << "the trainer's log:\n" << pub.log();
    const uint64_t before = standby.epoch();
    kill(primary.proc.pid(), SIGKILL);
    // The standby asks the reader to ask again until the trainer has moved
    // there; the trainer would only have moved after 30 s.
    Process r(worker({"fetch", "--server", standby.url, "--name", "reader", "--model", "gone", "--shard-kb", "64",
                      "--no-serve", "--exit", "--timeout-ms", "15000"}));
    std::string l = r.line(30000);
    EXPECT_EQ(l.rfind("ok", 0), 0u) << l << "\nthe trainer's log:\n" << pub.log();
    EXPECT_GT(standby.epoch(), before);  // it took over when the trainer came
    l = pub.proc.line(30000);
    EXPECT_EQ(l.rfind("ready", 0), 0u) << l;
    EXPECT_EQ(pub.proc.stop(), 0);
    const std::string log = pub.log();
    EXPECT_NE(log.find("no connection while a call waits (cannot reach the tensorhub server at " + primary.url +
                       ": Connection refused); failing over to " + standby.url),
              std::string::npos)
        << log;
}

namespace {

// The library's log lines in this process, while it lives.
struct LoggedLines {
    std::mutex mu;
    std::string text;
    LoggedLines() { th_set_log_handler(take, this); }
    ~LoggedLines() { th_set_log_handler(nullptr, nullptr); }
    static void take(th_log_level, const char *message, void *self) {
        auto *l = static_cast<LoggedLines *>(self);
        std::lock_guard lk(l->mu);
        l->text += std::string(message) + "\n";
    }
    std::string get() {
        std::lock_guard lk(mu);
        return text;
    }
};

}  // namespace

// A wait for a version shorter than a control call's timeout bounds its
// query by itself; the server, slow to answer it (0.4 s), has not failed
// when half of that passes: the worker stays, and the wait ends with its own
// timeout, not on another server.
TEST(Failover, AWaitsShortQueryToASlowServerDoesNotFailItOver) {
    ServerProc standby(true);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the primary gets the newer epoch
    ServerProc primary(false, {"TENSORHUB_FAULT_RESOLVE_ANSWER_DELAY_US=400000"});
    ASSERT_GT(primary.epoch(), standby.epoch());
    LoggedLines lines;
    th_client *c = connect(primary.url + "," + standby.url, "waiter", 10000);
    ASSERT_NE(c, nullptr);
    uint64_t v = 0;
    EXPECT_ERROR(th_wait_for_version(c, "m", 0, 700, &v), TH_ERR_TIMEOUT, "no version of model 'm'");
    th_client_destroy(c);
    EXPECT_EQ(lines.get().find("failing over"), std::string::npos) << lines.get();
    EXPECT_TRUE(server_status(standby.url)["workers"].empty()) << server_status(standby.url).dump(1);
}
