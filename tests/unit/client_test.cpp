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
