// tensorhub-server: the ROS metadata server as its own process.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <cstdlib>
#include <fstream>
#include <stdexcept>

#include <unistd.h>

#include "args.hpp"
#include "tensorhub/tensorhub.h"

static volatile sig_atomic_t g_stop = 0;
static void on_signal(int) { g_stop = 1; }

static const std::string kUsage =
    "usage: tensorhub-server [--listen URL] [--lease-ms N] [--max-readers-per-source N] [--stripes K] [--standby]\n"
    "                        [--etcd HOST:PORT,... [--etcd-prefix P] [--etcd-lease-ms N] [--advertise URL]]\n"
    "  --listen URL    NNG URL to serve on (default tcp://0.0.0.0:7070; port 0 picks one)\n"
    "  --lease-ms N    a worker silent this long loses its replicas (default " +
    std::to_string(TH_DEFAULT_LEASE_MS) +
    ")\n"
    "  --max-readers-per-source N   fan-out cap per source (default " +
    std::to_string(TH_DEFAULT_MAX_READERS_PER_SOURCE) +
    ")\n"
    "  --stripes K     readers that serve read a shard in K stripes, each relayed along its own\n"
    "                  tree (1: chains; at most 11; default 0: 8 once 24 workers are registered)\n"
    "  --metrics-listen URL  serve HTTP there (e.g. http://0.0.0.0:9090): Prometheus metrics at\n"
    "                  URL/metrics, the live page at URL/, its status document at URL/api/status\n"
    "  --standby       this server waits to take over from another: until it has,\n"
    "                  clients asking for what it does not know yet are told to retry\n"
    "  --etcd HOST:PORT,...  high availability: campaign for leadership in this etcd; only the\n"
    "                  leader serves. Clients use server_url etcd://HOST:PORT,.../PREFIX\n"
    "  --etcd-prefix P the cluster's keys in etcd (default " TH_DEFAULT_ETCD_PREFIX ")\n"
    "  --etcd-lease-ms N   the leader's etcd lease: a dead leader is replaced within it (default " +
    std::to_string(TH_DEFAULT_ETCD_LEASE_MS) +
    ")\n"
    "  --advertise URL the URL clients reach this server at (default: the bound URL;\n"
    "                  required when listening on 0.0.0.0 with --etcd)\n"
    "  --token-file FILE   cluster token (first line of FILE); default $TENSORHUB_TOKEN.\n"
    "                  With a token, only peers that have it are served (docs/security.md).\n"
    "Prints 'listening on URL' once ready; stops on SIGINT/SIGTERM.\n";

int main(int argc, char **argv) {
    try {
        th_support::Args args(argc, argv, {"help", "standby"});
        if (args.has("help")) {
            std::fputs(kUsage.c_str(), stdout);
            return 0;
        }
        auto bad = args.unknown({"listen", "lease-ms", "max-readers-per-source", "stripes", "token-file", "metrics-listen", "standby",
                                 "etcd", "etcd-prefix", "etcd-lease-ms", "advertise"});
        if (!bad.empty() || !args.positional().empty()) {
            std::fprintf(stderr, "tensorhub-server: unknown argument%s\n%s",
                         bad.empty() ? "" : (" --" + bad[0]).c_str(), kUsage.c_str());
            return 2;
        }
        th_server_config cfg;
        th_server_config_init(&cfg, sizeof cfg);
        std::string listen = args.get("listen", "tcp://0.0.0.0:7070");
        cfg.listen_url = listen.c_str();
        cfg.lease_ms = static_cast<uint32_t>(args.get_u64("lease-ms", cfg.lease_ms));
        cfg.standby = args.has("standby") ? 1 : 0;
        cfg.max_readers_per_source = static_cast<uint32_t>(args.get_u64("max-readers-per-source", cfg.max_readers_per_source));
        cfg.stripes = static_cast<uint32_t>(args.get_u64("stripes", cfg.stripes));
        std::string etcd = args.get("etcd"), prefix = args.get("etcd-prefix", TH_DEFAULT_ETCD_PREFIX),
                    advertise = args.get("advertise");
        if (!etcd.empty()) cfg.etcd_endpoints = etcd.c_str();
        cfg.etcd_prefix = prefix.c_str();
        cfg.etcd_lease_ms = static_cast<uint32_t>(args.get_u64("etcd-lease-ms", cfg.etcd_lease_ms));
        if (!advertise.empty()) cfg.advertise_url = advertise.c_str();
        std::string metrics = args.get("metrics-listen");
        if (!metrics.empty()) cfg.metrics_url = metrics.c_str();
        std::string token;  // read from a file, not argv: command lines are visible to every user
        if (args.has("token-file")) {
            std::ifstream in(args.get("token-file"));
            if (!in || !std::getline(in, token) || token.empty()) {
                std::fprintf(stderr, "tensorhub-server: cannot read a token from %s\n", args.get("token-file").c_str());
                return 2;
            }
            cfg.token = token.c_str();
        }
        std::signal(SIGINT, on_signal);
        std::signal(SIGTERM, on_signal);
        th_server *server = nullptr;
        if (th_server_create(&server, &cfg) != TH_OK) {
            std::fprintf(stderr, "tensorhub-server: %s\n", th_last_error());
            return 1;
        }
        std::printf("listening on %s\n", th_server_url(server));
        if (const std::string metrics = th_server_metrics_url(server); !metrics.empty()) {
            std::printf("metrics on %s\n", metrics.c_str());
            std::printf("live page on %s/\n", metrics.substr(0, metrics.size() - std::strlen("/metrics")).c_str());
        }
        std::fflush(stdout);
        while (!g_stop) pause();
        th_server_destroy(server);
        return 0;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "tensorhub-server: %s\n%s", e.what(), kUsage.c_str());
        return 2;
    }
}
