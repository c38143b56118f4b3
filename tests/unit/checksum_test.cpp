// Per-chunk checksums: declared by the publisher, kept by the server for the
// version, checked by readers; a holder whose bytes differ is read around.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "client/checksum.hpp"
#include "client/client.hpp"
#include "common/error.hpp"
#include "server/server.hpp"

using namespace th;

namespace {

constexpr uint64_t kBytes = 1 << 20;
constexpr uint64_t kChunk = 64 << 10;

std::vector<Buffer> one_tensor(std::vector<uint8_t> &bytes) {
    return {{{"w", TH_DTYPE_UINT8, {static_cast<int64_t>(bytes.size())}, bytes.size()}, bytes.data(), TH_MEM_HOST}};
}

struct ThreeWorkers {
    Server server{"tcp://127.0.0.1:0", ServiceConfig{}};
    ClientConfig cfg = [this] {
        ClientConfig c;
        c.server_url = server.url();
        return c;
    }();
    std::vector<uint8_t> original = std::vector<uint8_t>(kBytes);
    Client publisher{cfg}, relay{cfg};
    std::unique_ptr<Replica> published, relayed;
    std::vector<uint8_t> relay_bytes = std::vector<uint8_t>(kBytes);

    // The publisher declares checksums; the relay fetches and serves, then
    // its bytes of chunk 3 change behind the library's back (a bad DIMM, a
    // stray write).
    ThreeWorkers() {
        std::iota(original.begin(), original.end(), 0);
        published = publisher.publish("m", 1, 0, 1, kChunk, one_tensor(original));
        FetchRequest req;
        req.model = "m";
        relayed = relay.fetch(req, one_tensor(relay_bytes), /*serve=*/true).replica;
        relay_bytes[3 * kChunk + 17] ^= 0xff;
    }
    FetchResult read(Client &reader, th_verify verify, std::vector<uint8_t> &into) {
        FetchRequest req;
        req.model = "m";
        req.verify = verify;
        return reader.fetch(req, one_tensor(into), false);
    }
    ~ThreeWorkers() {
        relay.release(*relayed, false);
        publisher.release(*published, false);
    }
};

}  // namespace

TEST(Checksum, CoversTheChunkAcrossPieces) {
    std::vector<uint8_t> bytes(100);
    std::iota(bytes.begin(), bytes.end(), 1);
    uint64_t whole = checksum({{bytes.data(), 100, TH_MEM_HOST}});
    EXPECT_EQ(checksum({{bytes.data(), 40, TH_MEM_HOST}, {bytes.data() + 40, 60, TH_MEM_HOST}}), whole);
    bytes[99] ^= 1;
    EXPECT_NE(checksum({{bytes.data(), 100, TH_MEM_HOST}}), whole);
}

TEST(Checksum, AReaderThatVerifiesReadsACorruptChunkAgainElsewhere) {
    ThreeWorkers w;
    // Without verification the relay (preferred: it is not the publisher)
    // hands out its bytes as they are: what the check below catches.
    Client unchecked(w.cfg);
    std::vector<uint8_t> got(kBytes);
    FetchResult plain = w.read(unchecked, TH_VERIFY_OFF, got);
    EXPECT_NE(got, w.original);
    EXPECT_EQ(plain.stats.checksum_mismatches, 0u);

    Client checked(w.cfg);
    std::vector<uint8_t> good(kBytes);
    FetchResult verified = w.read(checked, TH_VERIFY_ALL, good);
    EXPECT_EQ(good, w.original);
    EXPECT_EQ(verified.stats.checksum_mismatches, 1u);
    EXPECT_GE(verified.stats.replans, 1u);
    EXPECT_EQ(verified.stats.failed_sources, 1u);
}

TEST(Checksum, AVersionPublishedAgainWithOtherBytesIsAConflict) {
    Server server("tcp://127.0.0.1:0", ServiceConfig{});
    ClientConfig cfg;
    cfg.server_url = server.url();
    Client a(cfg), b(cfg);
    std::vector<uint8_t> mine(kBytes, 1), theirs(kBytes, 1);
    theirs[5 * kChunk] = 2;
    auto r = a.publish("m", 1, 0, 1, kChunk, one_tensor(mine));
    try {
        b.publish("m", 1, 0, 1, kChunk, one_tensor(theirs));
        FAIL() << "a second publisher declared other bytes for the same version";
    } catch (const Error &e) {
        EXPECT_EQ(e.code(), TH_ERR_CONFLICT);
        EXPECT_NE(std::string(e.what()).find("chunk 5 has another checksum"), std::string::npos) << e.what();
    }
    // Without checksums nothing can be compared: the publish is taken.
    auto same = b.publish("m", 1, 0, 1, kChunk, one_tensor(mine), nullptr, /*checksums=*/false);
    b.release(*same, false);
    a.release(*r, false);
}
