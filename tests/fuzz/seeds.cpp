// Writes the seed corpus: one well-formed message of every kind a server
// receives (corpus/server) and of every kind a client receives
// (corpus/client, produced by a real service answering the seed requests).
//   th_fuzz_seeds tests/fuzz/corpus
#include <cstdio>
#include <fstream>
#include <string>

#include "../unit/messages.hpp"
#include "server/service.hpp"

using namespace th;
using namespace th::test;

namespace {

void save(const std::string &dir, const std::string &name, const Bytes &b) {
    std::ofstream(dir + "/" + name, std::ios::binary).write(reinterpret_cast<const char *>(b.data()), b.size());
}

}  // namespace

int main(int argc, char **argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: th_fuzz_seeds CORPUS_DIR\n");
        return 2;
    }
    std::string server = std::string(argv[1]) + "/server", client = std::string(argv[1]) + "/client";
    auto ts = specs(8192, 2);
    std::vector<std::pair<std::string, Bytes>> requests = {
        {"hello", hello(7, 1, {{"dc", "a"}})},
        {"publish", publish(7, 2, "m", 2, 0, 1, ts, 200)},
        {"plan", plan(7, 3, "m", UINT64_MAX, 0, 300, &ts)},
        {"status", status(4)},
    };
    auto simple = [](const char *name, auto make) {
        Builder b;
        return std::make_pair(std::string(name), finish(b, hdr(7, 10), make(b)));
    };
    requests.push_back(simple("heartbeat", [](Builder &b) { return CreateHeartbeat(b); }));
    requests.push_back(simple("resolve", [](Builder &b) { return CreateResolve(b, b.CreateString("m"), UINT64_MAX); }));
    requests.push_back(simple("progress", [](Builder &b) { return CreateProgress(b, 300, 1); }));
    requests.push_back(simple("fetch_done", [](Builder &b) {
        std::vector<flatbuffers::Offset<SourceBytes>> from = {CreateSourceBytes(b, 7, 8192, 200)};
        return CreateFetchDone(b, b.CreateString("m"), 2, 0, 300, true, b.CreateVector(from));
    }));
    requests.push_back(simple("source_failed", [](Builder &b) { return CreateSourceFailed(b, 8, b.CreateString("x")); }));
    requests.push_back(simple("source_stalled", [](Builder &b) {
        return CreateSourceFailed(b, 7, b.CreateString("x"), 300, 0, /*stalled=*/true);
    }));
    requests.push_back(simple("release", [](Builder &b) { return CreateRelease(b, 200); }));
    requests.push_back(simple("begin_mutation", [](Builder &b) { return CreateBeginMutation(b, 200); }));
    requests.push_back(simple("cancel_mutation", [](Builder &b) { return CreateCancelMutation(b, 200); }));
    requests.push_back(simple("pin", [](Builder &b) { return CreatePin(b, b.CreateString("m"), 2, true); }));
    requests.push_back(simple("describe", [](Builder &b) { return CreateDescribe(b, b.CreateString("m"), 2, 0); }));
    requests.push_back(simple("ping", [](Builder &b) { return CreatePing(b); }));
    requests.push_back(simple("goodbye", [](Builder &b) { return CreateGoodbye(b); }));

    // The client corpus: what a real service answers to those requests.
    Service svc{ServiceConfig{}};
    for (auto &[name, req] : requests) {
        save(server, name, req);
        save(client, name + "_reply", svc.handle(req.data(), req.size()));
    }
    Builder b;
    save(client, "event", finish(b, hdr(0, 0), CreateEvent(b, 1, EventKind::Committed, b.CreateString("m"), 2, 0)));
    std::printf("wrote %zu server and %zu client seeds\n", requests.size(), requests.size() + 1);
    return 0;
}
