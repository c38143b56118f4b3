// tensorhub: command-line view of a tensorhub server, built on the public C API.
// Every command reads the server's status document (th_server_status_json)
// and prints a view of it, for people (--format human) or scripts (json).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "args.hpp"
#include "tensorhub/tensorhub.h"

using nlohmann::json;
using th_support::human_bytes;

namespace {

const char *kUsage =
    "usage: tensorhub COMMAND [--server URL] [--format human|json] [--timeout-ms N]\n"
    "commands:\n"
    "  status                  workers, models, versions, shards, replicas, reads\n"
    "  workers                 registered workers, their labels and bytes served\n"
    "  versions MODEL          versions of a model: committed, pinned, required, holders\n"
    "  holders MODEL VERSION   who holds each shard of a version, and how far it filled\n"
    "  watch [--interval-ms N] [--count N]\n"
    "                          print changes (commits, retirements, workers joining and\n"
    "                          leaving) as they happen, until interrupted or N changes\n"
    "options:\n"
    "  --server URL            server address (default: $TENSORHUB_SERVER); an http:// URL reads\n"
    "                          the server's HTTP endpoint (--metrics-listen), as its live page does\n"
    "  --format human|json     output format (default human; --json is short for json)\n"
    "exit codes: 0 ok, 1 server failed or unreachable, 2 usage, 3 model or version not found\n";

enum Exit { kOk = 0, kServer = 1, kBadUsage = 2, kNotFound = 3 };

struct Failure {
    Exit code;
    std::string message;
};

unsigned long long u(const json &j) { return j.get<unsigned long long>(); }

json fetch_status(const std::string &url, uint32_t timeout_ms) {
    char *out = nullptr;
    if (th_server_status_json(url.c_str(), timeout_ms, &out) != TH_OK) throw Failure{kServer, th_last_error()};
    json j = json::parse(out);
    th_free(out);
    return j;
}

std::map<uint64_t, std::string> worker_names(const json &s) {
    std::map<uint64_t, std::string> names;
    for (const auto &w : s["workers"]) names[w["worker_id"].get<uint64_t>()] = w["name"].get<std::string>();
    return names;
}

std::string name_of(const std::map<uint64_t, std::string> &names, uint64_t id) {
    auto it = names.find(id);
    return it == names.end() ? std::to_string(id) : it->second;
}

std::string labels_of(const json &w) {
    std::string out;
    for (auto &[k, v] : w["labels"].items()) out += (out.empty() ? "" : ",") + k + "=" + v.get<std::string>();
    return out;
}

const json &find_model(const json &s, const std::string &model) {
    for (const auto &m : s["models"])
        if (m["name"] == model) return m;
    throw Failure{kNotFound, "model '" + model + "' is unknown to the server"};
}

const json &find_version(const json &m, uint64_t v) {
    for (const auto &ver : m["versions"])
        if (ver["version"].get<uint64_t>() == v) return ver;
    throw Failure{kNotFound, "model '" + m["name"].get<std::string>() + "' has no version " + std::to_string(v)};
}

std::string replica_state(const json &r) {
    if (r["mutating"].get<bool>()) return "mutating";
    if (!r["complete"].get<bool>()) {
        std::string what = r.value("stalled", false) ? "stalled at " : "filling ";
        return what + std::to_string(u(r["chunks_done"]));
    }
    if (r["owned"].get<bool>()) return "owned copy";
    return r["publisher"].get<bool>() ? "published" : "complete";
}

void print_workers(const json &s) {
    std::printf("%-24s %-40s %12s %6s %9s\n", "name", "labels", "served", "reads", "seen");
    for (const auto &w : s["workers"])
        std::printf("%-24s %-40s %12s %6llu %7llums\n", w["name"].get<std::string>().c_str(), labels_of(w).c_str(),
                    human_bytes(w["bytes_served"].get<double>()).c_str(), u(w["active_reads"]), u(w["last_seen_ms_ago"]));
}

void print_holders(const json &ver, const std::map<uint64_t, std::string> &names, const char *indent) {
    for (const auto &sh : ver["shards"]) {
        std::printf("%sshard %llu (%s, %llu chunks):", indent, u(sh["shard"]), human_bytes(sh["bytes"].get<double>()).c_str(),
                    u(sh["chunks"]));
        for (const auto &r : sh["replicas"])
            std::printf(" %s[%s]", name_of(names, r["worker_id"].get<uint64_t>()).c_str(), replica_state(r).c_str());
        std::printf("\n");
    }
}

std::string version_flags(const json &v) {
    std::string out = v["committed"].get<bool>() ? "committed" : "incomplete";
    if (v.value("pinned", false)) out += ", pinned";
    if (v.value("required", false)) out += ", required";
    return out;
}

void print_status(const json &s) {
    auto names = worker_names(s);
    std::printf("server epoch %llu, up %.1f s\n\nworkers (%zu)\n", u(s["server_epoch"]), u(s["uptime_ms"]) / 1000.0,
                s["workers"].size());
    print_workers(s);
    std::printf("\nmodels (%zu)\n", s["models"].size());
    for (const auto &m : s["models"]) {
        std::string latest = m["latest"].is_null() ? "none" : std::to_string(u(m["latest"]));
        std::printf("  %s (latest committed: %s)\n", m["name"].get<std::string>().c_str(), latest.c_str());
        for (const auto &v : m["versions"]) {
            std::printf("    version %llu: %s, %llu shards\n", u(v["version"]), version_flags(v).c_str(), u(v["num_shards"]));
            print_holders(v, names, "      ");
            for (const auto &r : v["reads"])
                std::printf("      read: %s <- %s, shard %llu, %s\n", name_of(names, r["reader"].get<uint64_t>()).c_str(),
                            name_of(names, r["source"].get<uint64_t>()).c_str(), u(r["shard"]),
                            r.value("active", false) ? "in progress" : human_bytes(r["bytes"].get<double>()).c_str());
        }
    }
}

// One line per difference between two status documents.
void diff(const json &before, const json &after, const std::function<void(const json &)> &emit) {
    auto versions = [](const json &s) {
        std::map<std::pair<std::string, uint64_t>, bool> out;  // -> committed
        for (const auto &m : s["models"])
            for (const auto &v : m["versions"]) out[{m["name"], v["version"]}] = v["committed"];
        return out;
    };
    auto a = versions(before), b = versions(after);
    for (auto &[k, committed] : b)
        if (committed && (!a.count(k) || !a[k])) emit({{"event", "committed"}, {"model", k.first}, {"version", k.second}});
    for (auto &[k, committed] : a)
        if (!b.count(k)) emit({{"event", "retired"}, {"model", k.first}, {"version", k.second}});
    auto na = worker_names(before), nb = worker_names(after);
    for (auto &[id, name] : nb)
        if (!na.count(id)) emit({{"event", "worker_joined"}, {"worker_id", id}, {"name", name}});
    for (auto &[id, name] : na)
        if (!nb.count(id)) emit({{"event", "worker_left"}, {"worker_id", id}, {"name", name}});
}

int run(const th_support::Args &args) {
    const auto &pos = args.positional();
    const std::string &cmd = pos[0];
    std::string format = args.has("json") ? "json" : args.get("format", "human");
    if (format != "human" && format != "json") throw Failure{kBadUsage, "--format must be human or json"};
    bool as_json = format == "json";
    static const std::map<std::string, size_t> arity = {
        {"status", 1}, {"workers", 1}, {"versions", 2}, {"holders", 3}, {"watch", 1}};
    auto a = arity.find(cmd);
    if (a == arity.end()) throw Failure{kBadUsage, "unknown command '" + cmd + "'"};
    if (pos.size() != a->second) throw Failure{kBadUsage, "'" + cmd + "' takes " + std::to_string(a->second - 1) + " argument(s)"};
    const char *env = std::getenv("TENSORHUB_SERVER");
    std::string url = args.get("server", env ? env : "");
    if (url.empty()) throw Failure{kBadUsage, "no server given (--server URL or TENSORHUB_SERVER)"};
    auto timeout = static_cast<uint32_t>(args.get_u64("timeout-ms", 5000));
    json s = fetch_status(url, timeout);

    if (cmd == "status") {
        as_json ? (void)std::printf("%s\n", s.dump().c_str()) : print_status(s);
    } else if (cmd == "workers") {
        as_json ? (void)std::printf("%s\n", s["workers"].dump().c_str()) : print_workers(s);
    } else if (cmd == "versions") {
        const json &m = find_model(s, pos[1]);
        if (as_json) {
            json out = json::array();
            for (const auto &v : m["versions"]) {
                json e = v;
                e.erase("shards");
                e.erase("reads");
                out.push_back(e);
            }
            std::printf("%s\n", json{{"model", m["name"]}, {"latest", m["latest"]}, {"versions", out}}.dump().c_str());
        } else {
            for (const auto &v : m["versions"]) {
                size_t holders = 0;
                for (const auto &sh : v["shards"]) holders += sh["replicas"].size();
                std::printf("%llu\t%s\t%zu replicas%s\n", u(v["version"]), version_flags(v).c_str(), holders,
                            !m["latest"].is_null() && u(m["latest"]) == u(v["version"]) ? "\tlatest" : "");
            }
        }
    } else if (cmd == "holders") {
        uint64_t version = std::stoull(pos[2]);
        const json &v = find_version(find_model(s, pos[1]), version);
        auto names = worker_names(s);
        if (as_json) {
            json out = json::array();
            for (const auto &sh : v["shards"])
                for (const auto &r : sh["replicas"]) {
                    json e = r;
                    e["shard"] = sh["shard"];
                    e["worker"] = name_of(names, r["worker_id"].get<uint64_t>());
                    e["state"] = replica_state(r);
                    out.push_back(e);
                }
            std::printf("%s\n", out.dump().c_str());
        } else {
            print_holders(v, names, "");
        }
    } else {  // watch
        auto interval = std::chrono::milliseconds(args.get_u64("interval-ms", 500));
        uint64_t count = args.get_u64("count", 0), seen = 0;
        auto emit = [&](const json &e) {
            if (as_json) {
                std::printf("%s\n", e.dump().c_str());
            } else if (e.contains("model")) {
                std::printf("%s %s v%llu\n", e["event"].get<std::string>().c_str(), e["model"].get<std::string>().c_str(),
                            u(e["version"]));
            } else {
                std::printf("%s %s\n", e["event"].get<std::string>().c_str(), e["name"].get<std::string>().c_str());
            }
            std::fflush(stdout);
            ++seen;
        };
        // The first snapshot is reported as what exists now.
        diff(json{{"models", json::array()}, {"workers", json::array()}}, s, emit);
        while (count == 0 || seen < count) {
            std::this_thread::sleep_for(interval);
            json next = fetch_status(url, timeout);
            diff(s, next, emit);
            s = std::move(next);
        }
    }
    return kOk;
}

}  // namespace

int main(int argc, char **argv) {
    try {
        th_support::Args args(argc, argv, {"json", "help"});
        if (args.has("help")) {
            std::fputs(kUsage, stdout);
            return kOk;
        }
        auto bad = args.unknown({"server", "json", "format", "timeout-ms", "interval-ms", "count"});
        if (!bad.empty()) throw Failure{kBadUsage, "unknown option --" + bad[0]};
        if (args.positional().empty()) throw Failure{kBadUsage, "no command given"};
        return run(args);
    } catch (const Failure &f) {
        std::fprintf(stderr, "tensorhub: %s\n", f.message.c_str());
        if (f.code == kBadUsage) std::fputs(kUsage, stderr);
        return f.code;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "tensorhub: %s\n%s", e.what(), kUsage);
        return kBadUsage;
    }
}
