// th_fault_driver: randomized fault injection against a real tensorhub
// cluster of processes (a tensorhub-server, a publisher and readers that are
// th_test_worker processes verifying every byte they fetch). Each run starts a
// fresh cluster, injects ONE fault of one kind at a seeded random point, then
// checks the invariants:
//   - every completed fetch had exactly the published bytes of one version
//     (the worker checks; "corrupt", "mixed" or another version = violation);
//   - no reader hangs: each one finishes or fails within a bound, and every
//     process still running at the end exits within a bound of SIGTERM;
//   - readers in flight at the fault complete (the library recovers), and the
//     version stays fetchable by a fresh reader while a live holder exists.
// See tests/fault/README.md for the fault kinds and how to read the table.
//
//   th_fault_driver --server-bin PATH --worker-bin PATH
//                   [--seed S] [--kinds k1,k2] [--runs N] [--long] [--log-dir DIR] [--keep-logs]
#include <cmath>
#include <csignal>
#include <sstream>
#include <stdexcept>

#include "args.hpp"
#include "kinds.hpp"

namespace th_fault {
namespace {

constexpr KindInfo kKinds[] = {
    {Kind::SourceKill, "source-kill"},   {Kind::SourceStop, "source-stop"},       {Kind::ServerKill, "server-kill"},
    {Kind::Mutation, "mutation"},        {Kind::ControlFaults, "control-faults"}, {Kind::ReaderKill, "reader-kill"},
    {Kind::SpotLoss, "spot-loss"},       {Kind::Chaos, "chaos"},                  {Kind::ChaosEtcd, "chaos-etcd"},
    {Kind::CorruptHolder, "corrupt-holder"},
};
// Runs without --kinds: every kind but the chaos kinds, which are long and
// run only when named.
bool runs_by_default(Kind k) { return k != Kind::Chaos && k != Kind::ChaosEtcd; }

const char *kUsage =
    "usage: th_fault_driver --server-bin PATH --worker-bin PATH\n"
    "                       [--seed S] [--kinds k1,k2] [--runs N] [--long] [--log-dir DIR] [--keep-logs]\n"
    "                       [--chaos-seconds N]\n"
    "  kinds (names or 1-10): source-kill source-stop server-kill mutation control-faults reader-kill\n"
    "                       spot-loss corrupt-holder, and chaos, chaos-etcd (only when named:\n"
    "                       --chaos-seconds long, default 20; chaos-etcd needs etcd on PATH)\n"
    "  --runs N     runs per kind (default 2; --long: 100)\n"
    "  --seed S     run i of a kind uses seed S+i: '--seed S+i --kinds K --runs 1' replays it\n"
    "  --keep-logs  keep every run's logs (by default only failed runs' logs are kept)\n";

std::vector<KindInfo> parse_kinds(const std::string &list) {
    std::vector<KindInfo> out;
    std::stringstream ss(list);
    for (std::string k; std::getline(ss, k, ',');) {
        bool found = false;
        for (size_t i = 0; i < std::size(kKinds); ++i)
            if (k == kKinds[i].name || k == std::to_string(i + 1)) {
                out.push_back(kKinds[i]);
                found = true;
            }
        if (!found) throw std::runtime_error("unknown fault kind '" + k + "'");
    }
    return out;
}

Options parse_options(int argc, char **argv) {
    th_support::Args args(argc, argv, {"long", "keep-logs", "help"});
    if (args.has("help")) {
        std::fputs(kUsage, stdout);
        std::exit(0);
    }
    auto bad = args.unknown(
        {"server-bin", "worker-bin", "seed", "kinds", "runs", "long", "log-dir", "keep-logs", "chaos-seconds"});
    if (!bad.empty() || !args.positional().empty())
        throw std::runtime_error("unknown argument " + (bad.empty() ? args.positional()[0] : "--" + bad[0]));
    Options o;
    o.server_bin = args.get("server-bin");
    o.worker_bin = args.get("worker-bin");
    if (o.server_bin.empty() || o.worker_bin.empty())
        throw std::runtime_error("--server-bin and --worker-bin are required");
    o.seed = args.get_u64("seed", o.seed);
    o.runs = static_cast<int>(args.get_u64("runs", args.has("long") ? 100 : 2));
    o.keep_logs = args.has("keep-logs");
    o.log_dir = args.get("log-dir");
    o.chaos_seconds = static_cast<int>(args.get_u64("chaos-seconds", static_cast<uint64_t>(o.chaos_seconds)));
    if (o.chaos_seconds < 5) throw std::runtime_error("--chaos-seconds must be at least 5");
    if (args.has("kinds")) {
        o.kinds = parse_kinds(args.get("kinds"));
    } else {
        for (const KindInfo &k : kKinds)
            if (runs_by_default(k.kind)) o.kinds.push_back(k);
    }
    return o;
}

void run_scenario(Run &run, Kind kind, const Options &opt) {
    switch (kind) {
    case Kind::SourceKill: return holder_fault(run, false);
    case Kind::SourceStop: return holder_fault(run, true);
    case Kind::ServerKill: return server_kill(run);
    case Kind::Mutation: return mutation(run);
    case Kind::ControlFaults: return control_faults(run);
    case Kind::ReaderKill: return reader_kill(run);
    case Kind::SpotLoss: return spot_loss(run);
    case Kind::Chaos: return chaos(run, opt.chaos_seconds, false);
    case Kind::ChaosEtcd: return chaos(run, opt.chaos_seconds, true);
    case Kind::CorruptHolder: return corrupt_holder(run);
    }
}

// ---------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------

struct KindSummary {
    int runs = 0, injected = 0, completed = 0, corrupt = 0, hung = 0, failed = 0;
    std::vector<double> recovery;
};

// Nearest-rank percentile of a non-empty sample.
double percentile(std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
    return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

void print_run(const KindInfo &k, int index, uint64_t seed, const RunResult &r, bool passed) {
    std::string rec;
    for (double ms : r.recovery_ms) {
        if (!rec.empty()) rec += ',';
        rec += std::to_string(static_cast<int64_t>(ms));
    }
    std::printf(
        "%-14s #%-3d seed=%-10llu %s | fault at %lld ms: %s | injected %s | %d fetches ok, %d failed | recovery %s "
        "ms\n",
        k.name, index, static_cast<unsigned long long>(seed), passed ? "PASS" : "FAIL",
        static_cast<long long>(r.fault_at_ms), r.fault.empty() ? "(none: setup failed)" : r.fault.c_str(),
        r.injected ? "yes" : "no", r.completed, r.errors, rec.empty() ? "-" : rec.c_str());
    std::fflush(stdout);
}

void print_table(const std::vector<KindInfo> &kinds, std::map<std::string, KindSummary> &sums) {
    std::printf("\n%-14s | %4s | %15s | %17s | %7s | %4s | %s\n", "fault kind", "runs", "faults injected",
                "fetches completed", "corrupt", "hung", "recovery median / p99 ms");
    std::printf("%s\n", std::string(100, '-').c_str());
    for (const KindInfo &k : kinds) {
        const KindSummary &s = sums[k.name];
        char rec[64] = "- / -";
        if (!s.recovery.empty())
            std::snprintf(rec, sizeof rec, "%.0f / %.0f", percentile(s.recovery, 50), percentile(s.recovery, 99));
        std::printf("%-14s | %4d | %15d | %17d | %7d | %4d | %s\n", k.name, s.runs, s.injected, s.completed, s.corrupt,
                    s.hung, rec);
    }
}

std::string make_log_root(const Options &opt) {
    if (!opt.log_dir.empty()) {
        std::filesystem::create_directories(opt.log_dir);
        return opt.log_dir;
    }
    char tmpl[] = "/tmp/th_fault.XXXXXX";
    if (!mkdtemp(tmpl)) throw std::runtime_error("cannot create a log directory in /tmp");
    return tmpl;
}

void on_fatal_signal(int sig) {
    kill_all_children();
    _exit(128 + sig);
}

int main_impl(int argc, char **argv) {
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, on_fatal_signal);
    Options opt = parse_options(argc, argv);
    std::string root = make_log_root(opt);
    std::printf("th_fault_driver: seed %llu, %d run(s) per kind, logs under %s\n",
                static_cast<unsigned long long>(opt.seed), opt.runs, root.c_str());
    std::fflush(stdout);

    std::map<std::string, KindSummary> sums;
    std::vector<std::string> failures;
    int passed = 0, failed = 0;
    for (const KindInfo &k : opt.kinds) {
        for (int i = 0; i < opt.runs; ++i) {
            uint64_t seed = opt.seed + static_cast<uint64_t>(i);
            std::string dir = root + "/" + k.name + "-" + std::to_string(i);
            RunResult r;
            {
                Run run(opt, k, i, seed, dir);
                try {
                    run_scenario(run, k.kind, opt);
                    run.finish();
                } catch (const std::exception &e) {
                    run.violation(std::string("driver error: ") + e.what());
                }
                r = run.result;
            }  // every child of the run is gone here
            bool ok = r.violations.empty();
            print_run(k, i, seed, r, ok);
            KindSummary &s = sums[k.name];
            s.runs++;
            s.injected += r.injected ? r.faults : 0;
            s.completed += r.completed;
            s.corrupt += r.corrupt;
            s.hung += r.hung;
            s.recovery.insert(s.recovery.end(), r.recovery_ms.begin(), r.recovery_ms.end());
            (ok ? passed : failed)++;
            if (ok && !opt.keep_logs) std::filesystem::remove_all(dir);
            if (!ok)
                failures.push_back(std::string(k.name) + " run " + std::to_string(i) + ": replay with --seed " +
                                   std::to_string(seed) + " --kinds " + k.name + " --runs 1; logs in " + dir);
        }
        if (sums[k.name].injected == 0)
            std::printf("  note: no %s run hit work in flight; try more --runs\n", k.name);
    }
    print_table(opt.kinds, sums);
    for (const std::string &f : failures) std::printf("FAILED %s\n", f.c_str());
    if (failures.empty() && !opt.keep_logs && opt.log_dir.empty()) std::filesystem::remove_all(root);
    std::printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace th_fault

int main(int argc, char **argv) {
    try {
        return th_fault::main_impl(argc, argv);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "th_fault_driver: %s\n%s", e.what(), th_fault::kUsage);
        th_fault::kill_all_children();
        return 2;
    }
}
