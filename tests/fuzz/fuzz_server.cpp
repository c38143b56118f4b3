// Fuzz target: every message handler of the server. The input is one request
// as it arrives from the network; the service (with some state already in it)
// must answer every input with a well-formed reply and never crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "server/service.hpp"
#include "wire/replica_desc.hpp"

namespace {

using namespace th;
using namespace th::wire;

// A service with a registered worker and a committed 2-shard version, so that
// requests reach deep into the handlers rather than stopping at "unknown".
Service &scratch() {
    static Service *svc = [] {
        auto *s = new Service(ServiceConfig{});
        Builder b;
        std::vector<uint8_t> addr = {1, 2, 3};
        Bytes hello = finish(b, Header{1, 7, 0}, CreateHello(b, 7, b.CreateString("seed"), 0, b.CreateVector(addr)));
        s->handle(hello.data(), hello.size());
        for (uint32_t shard = 0; shard < 2; ++shard) {
            std::vector<th::TensorSpec> ts = {{"w", TH_DTYPE_UINT8, {8192}, 8192}};
            th::ReplicaDesc d;
            d.regions = {{0x1000, 8192, {1}, 0}, {0x9000, 64, {2}, 0}};
            d.places = {{0, 0}};
            d.ctrl_region = 1;
            Builder pb;
            Bytes pub = finish(pb, Header{2 + shard, 7, 0},
                               CreatePublish(pb, pb.CreateString("m"), 1, shard, 2, 4096, put_tensors(pb, ts),
                                             put_desc(pb, d), 100 + shard));
            s->handle(pub.data(), pub.size());
        }
        return s;
    }();
    return *svc;
}

}  // namespace

// Bad requests are logged at warn: quiet them, the fuzzer makes millions.
extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    setenv("TENSORHUB_LOG_LEVEL", "error", 0);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Bytes reply = scratch().handle(data, size);
    // The reply itself must always be well-formed.
    verify(reply.data(), reply.size());
    return 0;
}
