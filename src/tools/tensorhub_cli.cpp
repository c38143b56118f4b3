// tensorhub: command-line view of a tensorhub server.
//   tensorhub status [--server URL] [--json] [--timeout-ms N]
// Exit codes: 0 ok, 1 the server failed or could not be reached, 2 usage.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "args.hpp"
#include "tensorhub/tensorhub.h"

using nlohmann::json;
using th_tools::human_bytes;

static const char *kUsage =
    "usage: tensorhub status [--server URL] [--json] [--timeout-ms N]\n"
    "  --server URL   server address (default: $TENSORHUB_SERVER)\n"
    "  --json         print the status as JSON\n";

static std::string worker_name(const std::map<uint64_t, std::string> &names, uint64_t id) {
    auto it = names.find(id);
    return it == names.end() ? std::to_string(id) : it->second;
}

static void print_human(const json &s) {
    std::map<uint64_t, std::string> names;
    std::printf("server epoch %llu, up %.1f s\n", static_cast<unsigned long long>(s["server_epoch"].get<uint64_t>()),
                s["uptime_ms"].get<uint64_t>() / 1000.0);
    std::printf("\nworkers (%zu)\n", s["workers"].size());
    std::printf("  %-24s %-40s %12s %6s %9s\n", "name", "labels", "served", "reads", "seen");
    for (const auto &w : s["workers"]) {
        names[w["worker_id"].get<uint64_t>()] = w["name"].get<std::string>();
        std::string labels;
        for (auto &[k, v] : w["labels"].items()) labels += (labels.empty() ? "" : ",") + k + "=" + v.get<std::string>();
        std::printf("  %-24s %-40s %12s %6llu %7llums\n", w["name"].get<std::string>().c_str(), labels.c_str(),
                    human_bytes(w["bytes_served"].get<double>()).c_str(),
                    static_cast<unsigned long long>(w["active_reads"].get<uint64_t>()),
                    static_cast<unsigned long long>(w["last_seen_ms_ago"].get<uint64_t>()));
    }
    std::printf("\nmodels (%zu)\n", s["models"].size());
    for (const auto &m : s["models"]) {
        std::string latest = m["latest"].is_null() ? "none" : std::to_string(m["latest"].get<uint64_t>());
        std::printf("  %s (latest committed: %s)\n", m["name"].get<std::string>().c_str(), latest.c_str());
        for (const auto &v : m["versions"]) {
            std::printf("    version %llu: %s, %llu shards\n", static_cast<unsigned long long>(v["version"].get<uint64_t>()),
                        v["committed"].get<bool>() ? "committed" : "incomplete",
                        static_cast<unsigned long long>(v["num_shards"].get<uint64_t>()));
            for (const auto &sh : v["shards"]) {
                std::printf("      shard %llu (%s, %llu chunks):", static_cast<unsigned long long>(sh["shard"].get<uint64_t>()),
                            human_bytes(sh["bytes"].get<double>()).c_str(),
                            static_cast<unsigned long long>(sh["chunks"].get<uint64_t>()));
                for (const auto &r : sh["replicas"]) {
                    std::string state = r["complete"].get<bool>()
                                            ? (r["publisher"].get<bool>() ? "published" : "complete")
                                            : "filling " + std::to_string(r["chunks_done"].get<uint64_t>());
                    std::printf(" %s[%s]", worker_name(names, r["worker_id"].get<uint64_t>()).c_str(), state.c_str());
                }
                std::printf("\n");
            }
            for (const auto &r : v["reads"])
                std::printf("      read: %s <- %s, shard %llu, %s\n", worker_name(names, r["reader"].get<uint64_t>()).c_str(),
                            worker_name(names, r["source"].get<uint64_t>()).c_str(),
                            static_cast<unsigned long long>(r["shard"].get<uint64_t>()),
                            human_bytes(r["bytes"].get<double>()).c_str());
        }
    }
}

int main(int argc, char **argv) {
    try {
        th_tools::Args args(argc, argv, {"json", "help"});
        if (args.has("help") || args.positional().empty()) {
            std::fputs(kUsage, args.has("help") ? stdout : stderr);
            return args.has("help") ? 0 : 2;
        }
        auto bad = args.unknown({"server", "json", "timeout-ms"});
        if (!bad.empty()) {
            std::fprintf(stderr, "tensorhub: unknown option --%s\n%s", bad[0].c_str(), kUsage);
            return 2;
        }
        const std::string &cmd = args.positional()[0];
        if (cmd != "status") {
            std::fprintf(stderr, "tensorhub: unknown command '%s'\n%s", cmd.c_str(), kUsage);
            return 2;
        }
        const char *env = std::getenv("TENSORHUB_SERVER");
        std::string url = args.get("server", env ? env : "");
        if (url.empty()) {
            std::fprintf(stderr, "tensorhub: no server given (--server URL or TENSORHUB_SERVER)\n");
            return 2;
        }
        char *out = nullptr;
        if (th_server_status_json(url.c_str(), static_cast<uint32_t>(args.get_u64("timeout-ms", 5000)), &out) != TH_OK) {
            std::fprintf(stderr, "tensorhub: %s\n", th_last_error());
            return 1;
        }
        std::string text = out;
        th_free(out);
        if (args.has("json")) {
            std::printf("%s\n", text.c_str());
        } else {
            print_human(json::parse(text));
        }
        return 0;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "tensorhub: %s\n", e.what());
        return 2;
    }
}
