// Internals of the client that the public API does not show.
#include <gtest/gtest.h>

#include <vector>

#include "client/client.hpp"
#include "server/server.hpp"

using namespace th;

TEST(Client, PublishingALaterVersionFromTheSameBuffersRegistersNothingNew) {
    Server server("tcp://127.0.0.1:0", ServiceConfig{});
    ClientConfig cfg;
    cfg.server_url = server.url();
    cfg.retention = TH_RETAIN_FAIL;  // no spill pool: its slabs are registrations of their own
    Client client(cfg);
    std::vector<uint8_t> a(1 << 20), b(1 << 16);
    auto buffers = [&] {
        return std::vector<Buffer>{{{"a", TH_DTYPE_UINT8, {1 << 20}, 1 << 20}, a.data(), TH_MEM_HOST},
                                   {{"b", TH_DTYPE_UINT8, {1 << 16}, 1 << 16}, b.data(), TH_MEM_HOST}};
    };
    auto v1 = client.publish("m", 1, 0, 1, 64 << 10, buffers());
    size_t after_first = client.ucx().registrations();
    auto v2 = client.publish("m", 2, 0, 1, 64 << 10, buffers());
    client.release(*v1, /*retain=*/false);
    auto v3 = client.publish("m", 3, 0, 1, 64 << 10, buffers());
    EXPECT_EQ(client.ucx().registrations(), after_first);
    client.release(*v2, false);
    client.release(*v3, false);
}

// A trainer's loop: publish, mutate (the last copy of the newest version is
// spilled), publish the next version from the same buffers, release the
// previous handle. The memory for owned copies is made at publish, and the
// previous version's copy, no longer required, gives its memory to the next.
TEST(Client, OwnedCopiesReuseTheSpillPoolAcrossVersions) {
    Server server("tcp://127.0.0.1:0", ServiceConfig{});
    ClientConfig cfg;
    cfg.server_url = server.url();
    Client client(cfg);
    constexpr uint64_t kBytes = 3 << 20;
    std::vector<uint8_t> a(kBytes);
    std::vector<Buffer> buffers{{{"a", TH_DTYPE_UINT8, {kBytes}, kBytes}, a.data(), TH_MEM_HOST}};
    std::unique_ptr<Replica> previous;
    for (uint64_t v = 1; v <= 6; ++v) {
        std::fill(a.begin(), a.end(), static_cast<uint8_t>(v));
        auto r = client.publish("m", v, 0, 1, 1 << 20, buffers);
        if (previous) client.release(*previous);
        client.begin_mutation(*r);  // the last copy of the newest version: spilled
        previous = std::move(r);
    }
    SpillPool::Usage u = client.spill_usage();
    EXPECT_LE(u.slabs, 2u) << "one slab in use, at most one spare";
    EXPECT_EQ(u.lent, 4u << 20) << "only the newest version's copy is held";
    // The copy serves the newest version's bytes.
    std::vector<uint8_t> got(kBytes);
    FetchRequest req;
    req.model = "m";
    Client reader(cfg);
    reader.fetch(req, {{{"a", TH_DTYPE_UINT8, {kBytes}, kBytes}, got.data(), TH_MEM_HOST}}, false);
    EXPECT_EQ(got, std::vector<uint8_t>(kBytes, 6));
    client.release(*previous);
}
