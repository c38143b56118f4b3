// CUDA device memory: published from the GPU and fetched by another client.
// Skips, saying why, where there is no CUDA build, no device, or a UCX
// without CUDA transports (Debian's).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "client/checksum.hpp"
#include "tensorhub/tensorhub.h"
#include "transport/memory_kind.hpp"

#ifdef TH_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

th_tensor tensor(void *p, uint64_t n, th_mem_kind kind) {
    th_tensor t{};
    t.name = "w";
    t.dtype = TH_DTYPE_UINT8;
    t.ndim = 1;
    t.shape[0] = static_cast<int64_t>(n);
    t.data = p;
    t.nbytes = n;
    t.mem_kind = kind;
    return t;
}

struct Env {
    th_server *server = nullptr;
    th_client *a = nullptr, *b = nullptr;
    Env() {
        th_server_config sc;
        th_server_config_init(&sc, sizeof sc);
        EXPECT_EQ(th_server_create(&server, &sc), TH_OK);
        th_client_config cc;
        th_client_config_init(&cc, sizeof cc);
        cc.server_url = th_server_url(server);
        EXPECT_EQ(th_client_create(&a, &cc), TH_OK) << th_last_error();
        EXPECT_EQ(th_client_create(&b, &cc), TH_OK) << th_last_error();
    }
    ~Env() {
        th_client_destroy(b);
        th_client_destroy(a);
        th_server_destroy(server);
    }
};

}  // namespace

TEST(Cuda, MemoryKindIsCheckedBeforeRegistration) {
    Env env;
    std::vector<uint8_t> host(1 << 16, 7);
    th_tensor t = tensor(host.data(), host.size(), TH_MEM_CUDA);
    th_publish_config pc;
    th_publish_config_init(&pc, sizeof pc);
    pc.model = "gpu";
    pc.version = 1;
    th_replica *r = nullptr;
    th_status st = th_publish(env.a, &pc, &t, 1, &r);
    std::string msg = th_last_error();
    if (th::cuda_available()) {
        EXPECT_EQ(st, TH_ERR_INVALID_ARG) << msg;
        EXPECT_NE(msg.find("not CUDA device memory"), std::string::npos) << msg;
    } else {
        EXPECT_EQ(st, TH_ERR_UNSUPPORTED) << msg;
        EXPECT_NE(msg.find("CUDA"), std::string::npos) << msg;
    }
    EXPECT_EQ(r, nullptr);
}

#ifdef TH_WITH_CUDA
namespace {

// Publishes n bytes from memory of kind `from` and fetches them into memory
// of kind `to` through the public API; the bytes must arrive unchanged.
void round_trip(th_mem_kind from, th_mem_kind to) {
    if (!th::cuda_available()) GTEST_SKIP() << "no CUDA device on this machine";
    Env env;
    const size_t n = (8 << 20) + 4096;
    std::vector<uint8_t> want(n);
    for (size_t i = 0; i < n; ++i) want[i] = static_cast<uint8_t>(i * 131 + 7);
    std::vector<uint8_t> host_src = want, host_dst(n);
    void *dev_src = nullptr, *dev_dst = nullptr;
    ASSERT_EQ(cudaMalloc(&dev_src, n), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dev_dst, n), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dev_src, want.data(), n, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemset(dev_dst, 0, n), cudaSuccess);
    th_tensor t = tensor(from == TH_MEM_CUDA ? dev_src : host_src.data(), n, from);
    th_publish_config pc;
    th_publish_config_init(&pc, sizeof pc);
    pc.model = "gpu";
    pc.version = 1;
    pc.chunk_bytes = 1 << 20;  // several chunks, read in parallel
    th_replica *r = nullptr;
    th_status st = th_publish(env.a, &pc, &t, 1, &r);
    if (st == TH_ERR_TRANSPORT && std::string(th_last_error()).find("CUDA support") != std::string::npos) {
        cudaFree(dev_src);
        cudaFree(dev_dst);
        GTEST_SKIP() << "this UCX has no CUDA transports: " << th_last_error();
    }
    ASSERT_EQ(st, TH_OK) << th_last_error();
    th_tensor d = tensor(to == TH_MEM_CUDA ? dev_dst : host_dst.data(), n, to);
    th_fetch_config fc;
    th_fetch_config_init(&fc, sizeof fc);
    fc.model = "gpu";
    fc.verify = TH_VERIFY_ALL;  // every chunk's checksum, computed from device memory
    th_replica *served = nullptr;
    ASSERT_EQ(th_fetch(env.b, &fc, &d, 1, nullptr, &served), TH_OK) << th_last_error();
    if (to == TH_MEM_CUDA) {
        ASSERT_EQ(cudaMemcpy(host_dst.data(), dev_dst, n, cudaMemcpyDeviceToHost), cudaSuccess);
    }
    EXPECT_EQ(host_dst, want);
    th_replica_release(served);
    th_replica_release(r);
    cudaFree(dev_src);
    cudaFree(dev_dst);
}

}  // namespace
#endif

TEST(Cuda, PublishFromDeviceMemoryAndFetchToHost) {
#ifndef TH_WITH_CUDA
    GTEST_SKIP() << "built without TH_WITH_CUDA";
#else
    round_trip(TH_MEM_CUDA, TH_MEM_HOST);
#endif
}

TEST(Cuda, PublishFromDeviceMemoryAndFetchToDeviceMemory) {
#ifndef TH_WITH_CUDA
    GTEST_SKIP() << "built without TH_WITH_CUDA";
#else
    round_trip(TH_MEM_CUDA, TH_MEM_CUDA);
#endif
}

TEST(Cuda, PublishFromHostAndFetchToDeviceMemory) {
#ifndef TH_WITH_CUDA
    GTEST_SKIP() << "built without TH_WITH_CUDA";
#else
    round_trip(TH_MEM_HOST, TH_MEM_CUDA);
#endif
}

#ifdef TH_WITH_CUDA
namespace {

// Device bytes at device + offset, the same bytes as host[offset...].
struct DeviceCopy {
    uint8_t *device = nullptr;
    explicit DeviceCopy(const std::vector<uint8_t> &host) {
        EXPECT_EQ(cudaMalloc(reinterpret_cast<void **>(&device), host.size()), cudaSuccess);
        EXPECT_EQ(cudaMemcpy(device, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
    }
    ~DeviceCopy() { cudaFree(device); }
};

// The same cut of [lo, hi) into pieces, over host and over device memory;
// every other piece on the device when mixed.
std::vector<th::ChunkPiece> cut(const uint8_t *host, const uint8_t *device, uint64_t lo, uint64_t hi,
                                const std::vector<uint64_t> &sizes, bool mixed) {
    std::vector<th::ChunkPiece> out;
    size_t i = 0;
    for (uint64_t at = lo; at < hi; ++i) {
        uint64_t n = std::min(sizes[i % sizes.size()], hi - at);
        bool on_device = device != nullptr && (!mixed || i % 2 == 0);
        out.push_back({(on_device ? device : host) + at, n, on_device ? TH_MEM_CUDA : TH_MEM_HOST});
        at += n;
    }
    return out;
}

}  // namespace
#endif

// Device memory is hashed on the GPU: whatever the cut into pieces, the
// alignment or the mix with host memory, its checksum is the host's.
TEST(Cuda, AChecksumOfDeviceMemoryIsTheChecksumOfItsBytes) {
#ifndef TH_WITH_CUDA
    GTEST_SKIP() << "built without TH_WITH_CUDA";
#else
    if (!th::cuda_available()) GTEST_SKIP() << "no CUDA device on this machine";
    const uint64_t n = (3 << 20) + 12345;
    std::vector<uint8_t> host(n);
    std::mt19937 rng(5);  // no period: a leaf hashed in another's place shows
    for (uint8_t &b : host) b = static_cast<uint8_t>(rng());
    DeviceCopy dev(host);
    struct Case {
        uint64_t lo, hi;
        std::vector<uint64_t> sizes;
        bool mixed;
    };
    const std::vector<Case> cases = {
        {0, 1 << 20, {1 << 20}, false},            // one aligned piece, whole leaves
        {3, (1 << 20) + 3, {1 << 20}, false},      // unaligned
        {0, n, {n}, false},                         // a short last leaf
        {5, n, {100000, 4096, 1, 77777}, false},   // leaves across device pieces
        {0, n, {70000, 8192, 333}, true},           // device and host pieces alternate
        {0, 600000, {1000}, false},                 // hundreds of small tensors
        {100, 100, {1}, false},                     // empty
    };
    for (const Case &c : cases) {
        uint64_t want = th::checksum(cut(host.data(), nullptr, c.lo, c.hi, c.sizes, false));
        EXPECT_EQ(th::checksum(cut(host.data(), dev.device, c.lo, c.hi, c.sizes, c.mixed)), want)
            << "[" << c.lo << ", " << c.hi << ") mixed " << c.mixed;
    }
    // A changed byte on the device changes it.
    uint64_t before = th::checksum({{dev.device, n, TH_MEM_CUDA}});
    uint8_t flipped = host[n / 2] ^ 1;
    ASSERT_EQ(cudaMemcpy(dev.device + n / 2, &flipped, 1, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_NE(th::checksum({{dev.device, n, TH_MEM_CUDA}}), before);
    // Threads at once take lanes of their own from the pool.
    std::vector<uint64_t> got(4);
    std::vector<std::thread> threads;
    for (size_t t = 0; t < got.size(); ++t)
        threads.emplace_back([&, t] {
            for (int i = 0; i < 20; ++i) got[t] = th::checksum({{dev.device + t, n - t, TH_MEM_CUDA}});
        });
    for (auto &th : threads) th.join();
    host[n / 2] = flipped;
    for (size_t t = 0; t < got.size(); ++t)
        EXPECT_EQ(got[t], th::checksum({{host.data() + t, n - t, TH_MEM_HOST}})) << "thread " << t;
#endif
}
