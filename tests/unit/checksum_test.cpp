// Per-chunk checksums: declared by the publisher, kept by the server for the
// version, checked by readers; a holder whose bytes differ is read around.
#include <gtest/gtest.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <regex>
#include <set>
#include <thread>
#include <vector>

#include "client/checksum.hpp"
#include "client/chunk_verifier.hpp"
#include "client/host_xxh3.hpp"
#include "client/xxh3_leaf.hpp"
#include "buffers.hpp"
#include "client/client.hpp"
#include "common/error.hpp"
#include "control/rpc.hpp"
#include "wire/wire.hpp"
#include "server/server.hpp"

using namespace th;

namespace {

constexpr uint64_t kBytes = 1 << 20;
constexpr uint64_t kChunk = 64 << 10;

struct ThreeWorkers {
    Server server{"tcp://127.0.0.1:0", ServiceConfig{}};
    ClientConfig cfg = [this] {
        ClientConfig c;
        c.server_url = server.url();
        c.heartbeat_ms = 50;  // a holder checks what readers reported at its next heartbeat
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

// Waits up to 10 s for the server's status (as JSON) to satisfy pred.
bool status_becomes(Client &c, const std::function<bool(const std::string &)> &pred) {
    auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!pred(c.status_json())) {
        if (std::chrono::steady_clock::now() > give_up) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
}

bool lists_replica(const std::string &status, uint64_t id) {
    return status.find(str("\"replica_id\":", id, ",")) != std::string::npos;
}

uint32_t reported_chunks(const std::string &status, uint64_t id) {
    std::smatch m;
    std::regex re(str("\"replica_id\":", id, ",[^}]*\"reported_chunks\":([0-9]+)"));
    return std::regex_search(status, m, re) ? static_cast<uint32_t>(std::stoul(m[1])) : UINT32_MAX;
}

}  // namespace

// A chunk is hashed when it lands, before its read is confirmed; the hash
// is used only for the landing it was asked for.
TEST(Checksum, AHashCountsOnlyForTheLandingItWasAskedFor) {
    ChunkSums sums;
    sums.reset(2);
    uint32_t first = sums.landed(0, true);
    EXPECT_TRUE(sums.asked(0));
    EXPECT_TRUE(sums.in_flight(0));
    EXPECT_FALSE(sums.sum(0).has_value());
    // Its source failed and the chunk was read again before the hash came back.
    uint32_t second = sums.landed(0, true);
    EXPECT_FALSE(sums.hashed(0, first, 111)) << "an earlier landing's hash was taken";
    EXPECT_FALSE(sums.sum(0).has_value());
    EXPECT_TRUE(sums.in_flight(0));
    EXPECT_TRUE(sums.hashed(0, second, 222));
    EXPECT_FALSE(sums.in_flight(0));
    EXPECT_EQ(sums.sum(0), std::optional<uint64_t>(222));
    // Sampling draws each landing afresh: one not hashed leaves nothing of
    // the last one's hash (torn bytes, say) to judge it by.
    sums.landed(0, false);
    EXPECT_FALSE(sums.asked(0));
    EXPECT_FALSE(sums.sum(0).has_value());
    EXPECT_FALSE(sums.in_flight(0));
    EXPECT_FALSE(sums.asked(1));
}

// The leaf hash, run lane by lane as the GPU's threads run it, is XXH3-64,
// at every alignment.
TEST(Checksum, TheLeafHashIsXxh3OfFourKiB) {
    std::mt19937_64 rng(7);
    std::vector<uint8_t> bytes(xxh3::kLeafBytes + 16);
    for (uint8_t &b : bytes) b = static_cast<uint8_t>(rng());
    for (int round = 0; round < 4; ++round) {
        for (size_t off = 0; off < 16; ++off) {
            const uint8_t *p = bytes.data() + off;
            uint64_t want = XXH3_64bits(p, xxh3::kLeafBytes);
            uint64_t got = xxh3::leaf_hash(p, xxh3::leaf_keys());
            EXPECT_EQ(got, want) << "offset " << off;
        }
        bytes[rng() % bytes.size()] ^= 0x5a;
    }
}

// Every implementation of the host hash this CPU can run gives libxxhash's
// XXH3-64, at every length class XXH3 treats apart (0, 1-3, 4-8, 9-16,
// 17-128, 129-240, longer, a partial last stripe and block) and alignment.
TEST(Checksum, TheHostHashIsLibxxhashsXxh3OnEveryUnit) {
    std::vector<std::pair<const char *, uint64_t (*)(const void *, size_t)>> units = {
        {"baseline", xxh3_units::baseline}};
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2")) units.push_back({"avx2", xxh3_units::avx2});
#endif
    std::mt19937_64 rng(11);
    std::vector<uint8_t> bytes(3 * xxh3::kLeafBytes + 64);
    for (uint8_t &b : bytes) b = static_cast<uint8_t>(rng());
    for (size_t len : {0, 1, 3, 4, 8, 9, 16, 17, 128, 129, 240, 241, 1000, 1024, 4095, 4096, 4097, 3 * 4096})
        for (size_t off : {0, 1, 7, 32}) {
            uint64_t want = XXH3_64bits(bytes.data() + off, len);
            for (auto &[name, fn] : units) EXPECT_EQ(fn(bytes.data() + off, len), want) << name << " length " << len << " offset " << off;
            EXPECT_EQ(host_xxh3(bytes.data() + off, len), want);
        }
    std::string unit = host_xxh3_unit();
    EXPECT_TRUE(unit == units.back().first) << "chose " << unit << " on a CPU that runs " << units.back().first;
}

// A chunk's checksum is XXH3-64 over its 4 KiB leaves' XXH3-64s; a short
// last leaf is hashed as it is, and an empty chunk has no leaves.
TEST(Checksum, IsTheHashOfItsLeavesHashes) {
    std::vector<uint8_t> bytes(2 * xxh3::kLeafBytes + 1000);
    std::iota(bytes.begin(), bytes.end(), 3);
    std::vector<uint64_t> leaves;
    for (uint64_t at = 0; at < bytes.size(); at += xxh3::kLeafBytes)
        leaves.push_back(XXH3_64bits(bytes.data() + at, std::min<uint64_t>(xxh3::kLeafBytes, bytes.size() - at)));
    uint64_t want = XXH3_64bits(leaves.data(), leaves.size() * 8);
    EXPECT_EQ(checksum({{bytes.data(), bytes.size(), TH_MEM_HOST}}), want);
    EXPECT_EQ(checksum({}), XXH3_64bits(nullptr, 0));
    // Pieces that cut leaves anywhere: the same bytes, the same checksum.
    std::vector<ChunkPiece> pieces;
    for (uint64_t at = 0, n = 1; at < bytes.size(); at += n, n = n * 3 + 1)
        pieces.push_back({bytes.data() + at, std::min<uint64_t>(n, bytes.size() - at), TH_MEM_HOST});
    EXPECT_GT(pieces.size(), 5u);
    EXPECT_EQ(checksum(pieces), want);
}

// A large shard's checksums are computed on several threads: each is the
// chunk's own checksum, in chunk order.
TEST(Checksum, AShardsChecksumsSplitAmongThreadsAreEachChunks) {
    const uint64_t chunk = 3 << 20, n = 96ull << 20;  // above the threshold for threads
    std::vector<uint8_t> bytes(n);
    std::mt19937_64 rng(11);
    for (uint64_t i = 0; i < n; i += 8) {
        uint64_t v = rng();
        std::memcpy(bytes.data() + i, &v, 8);
    }
    std::vector<std::vector<ChunkPiece>> chunks;
    for (uint64_t at = 0; at < n; at += chunk) chunks.push_back({{bytes.data() + at, std::min(chunk, n - at), TH_MEM_HOST}});
    std::vector<uint64_t> all = checksums(chunks);
    ASSERT_EQ(all.size(), chunks.size());
    for (size_t c = 0; c < chunks.size(); ++c) EXPECT_EQ(all[c], checksum(chunks[c])) << "chunk " << c;
    EXPECT_NE(all[0], all[1]);
}

// The verifier hashes every batch queued while it was busy in one run: each
// batch still gets the sums of its own chunks, in its order, and one Verified
// event per run wakes the fetch. Whether the small batches queue behind the
// big one depends on the scheduler (on a loaded machine the verifier can run
// each as it is submitted), so the run is tried up to five times for one in
// which they came back together; every try checks the sums and the order.
TEST(Checksum, TheVerifierHashesQueuedBatchesTogetherAndSplitsTheSums) {
    const uint64_t n = 24ull << 20;
    std::vector<uint8_t> bytes(n);
    std::mt19937_64 rng(5);
    for (uint64_t i = 0; i < n; i += 8) {
        uint64_t v = rng();
        std::memcpy(bytes.data() + i, &v, 8);
    }
    // A big batch first keeps the thread busy while the small ones queue.
    std::vector<ChunkVerifier::Batch> batches;
    std::vector<std::vector<uint64_t>> want;
    uint64_t at = 0;
    for (uint32_t b = 0; b < 12; ++b) {
        ChunkVerifier::Batch batch;
        uint64_t len = b == 0 ? 16ull << 20 : 64 << 10;
        for (uint32_t c = 0; c < 1 + b % 3 && at < n; ++c) {
            uint64_t take = std::min(len, n - at);
            batch.chunks.push_back(b * 10 + c);
            batch.pieces.push_back({{bytes.data() + at, take, TH_MEM_HOST}});
            at += take;
        }
        want.emplace_back();
        for (const auto &p : batch.pieces) want.back().push_back(checksum(p));
        batches.push_back(std::move(batch));
    }
    size_t wakes = 0;
    for (int attempt = 0; attempt < 5; ++attempt) {
        auto box = std::make_shared<Mailbox>();
        ChunkVerifier v(box);
        for (const auto &b : batches) v.submit(b);
        EXPECT_EQ(v.pending(), 12u);
        std::vector<ChunkVerifier::Batch> got;
        wakes = 0;
        auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (got.size() < 12 && std::chrono::steady_clock::now() < give_up) {
            for (const ReadEvent &e : box->take(std::chrono::milliseconds(100)))
                if (e.kind == ReadEvent::Verified) wakes++;
            for (auto &b : v.take_done()) got.push_back(std::move(b));
        }
        ASSERT_EQ(got.size(), 12u);
        EXPECT_EQ(v.pending(), 0u);
        for (size_t i = 0; i < got.size(); ++i) {
            EXPECT_EQ(got[i].code, TH_OK);
            EXPECT_EQ(got[i].chunks.front(), i * 10) << "batches come back in order";
            EXPECT_EQ(got[i].sums, want[i]) << "batch " << i;
        }
        if (wakes < 12) break;
    }
    EXPECT_LT(wakes, 12u) << "in five tries, the small batches never came back together";
}

// Only host bytes are split among threads: device chunks are hashed by one
// kernel launch a batch, which more threads would only multiply.
TEST(Checksum, OnlyHostMemoryIsSplitAmongThreads) {
    std::vector<uint8_t> byte(1);
    auto chunks_of = [&](th_mem_kind kind, uint64_t n, uint64_t len) {
        return std::vector<std::vector<ChunkPiece>>(n, {{byte.data(), len, kind}});
    };
    EXPECT_EQ(checksum_threads(chunks_of(TH_MEM_HOST, 256, 4 << 20), 16), 8u);
    EXPECT_EQ(checksum_threads(chunks_of(TH_MEM_HOST, 256, 4 << 20), 2), 2u);
    EXPECT_EQ(checksum_threads(chunks_of(TH_MEM_HOST, 3, 4 << 20), 16), 1u);  // under 64 MiB
    EXPECT_EQ(checksum_threads(chunks_of(TH_MEM_HOST, 32, 4 << 20), 16), 8u);
    EXPECT_EQ(checksum_threads(chunks_of(TH_MEM_CUDA, 2048, 4 << 20), 16), 1u);  // 8 GiB on a GPU
    // A chunk across host and device memory counts its host part.
    std::vector<std::vector<ChunkPiece>> mixed(64, {{byte.data(), 4 << 20, TH_MEM_CUDA}, {byte.data(), 2 << 20, TH_MEM_HOST}});
    EXPECT_EQ(checksum_threads(mixed, 4), 4u);
}

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

// The reader's report sends the relay to check its own copy (at its next
// heartbeat): chunk 3 changed there, so it withdraws the replica for good. No
// reader is routed to it again, checking or not, and its handle still goes
// through begin-mutation and release as usual.
TEST(Checksum, AHolderReportedForAMismatchChecksItsCopyAndWithdrawsIt) {
    ThreeWorkers w;
    Client checked(w.cfg);
    std::vector<uint8_t> good(kBytes);
    ASSERT_EQ(w.read(checked, TH_VERIFY_ALL, good).stats.checksum_mismatches, 1u);
    uint64_t relayed = w.relayed->id(), published = w.published->id();
    ASSERT_TRUE(status_becomes(checked, [&](const std::string &s) { return !lists_replica(s, relayed); }))
        << checked.status_json();
    EXPECT_TRUE(w.relayed->withdrawn());
    EXPECT_FALSE(w.published->withdrawn());
    EXPECT_EQ(reported_chunks(checked.status_json(), published), 0u);
    for (int i = 0; i < 3; ++i) {
        Client unchecked(w.cfg);
        std::vector<uint8_t> got(kBytes);
        FetchResult r = w.read(unchecked, TH_VERIFY_OFF, got);
        EXPECT_EQ(got, w.original) << "reader " << i;
        EXPECT_EQ(r.stats.failed_sources, 0u);
    }
    w.relay.begin_mutation(*w.relayed);
}

// A report whose chunks are intact at the holder (damaged on the way, or a
// reader's mistake) costs the holder a check, not its replica: it is routed
// to again, here as the only holder of the version.
// Here a heartbeat checks one chunk (check_bytes_per_beat): the three
// reported are answered for one after the other, a heartbeat apart. The
// status is polled: seeing 2 or 1 still reported is seeing them answered
// apart (two windows of a heartbeat each, so that one stall of the polling
// on a loaded machine does not miss both).
TEST(Checksum, AHolderWhoseReportedChunksAreIntactIsRoutedToAgain) {
    Server server("tcp://127.0.0.1:0", ServiceConfig{});
    ClientConfig cfg;
    cfg.server_url = server.url();
    cfg.heartbeat_ms = 300;
    cfg.check_bytes_per_beat = kChunk;
    std::vector<uint8_t> original(kBytes);
    std::iota(original.begin(), original.end(), 0);
    Client publisher(cfg), reader(cfg);
    auto published = publisher.publish("m", 1, 0, 1, kChunk, one_tensor(original));
    {
        using namespace th::wire;
        RpcClient rpc(server.url());
        Builder b;
        Bytes reply = rpc.call(
            finish(b, Header{1, reader.worker_id(), 0},
                         CreateSourceFailed(b, publisher.worker_id(), b.CreateString("chunk 2 does not match"),
                                            published->id(), b.CreateVector(std::vector<uint32_t>{2, 5, 7}))),
            Deadline(5000));
        ASSERT_EQ(verify(reply.data(), reply.size())->body_type(), Body::Ack);
    }
    std::set<uint32_t> seen;
    ASSERT_TRUE(status_becomes(reader, [&](const std::string &s) {
        seen.insert(reported_chunks(s, published->id()));
        return reported_chunks(s, published->id()) == 0;
    })) << reader.status_json();
    EXPECT_TRUE(seen.count(2) || seen.count(1)) << "the chunks were answered for at once";
    EXPECT_FALSE(published->withdrawn());
    std::vector<uint8_t> got(kBytes);
    FetchRequest req;
    req.model = "m";
    req.verify = TH_VERIFY_ALL;
    FetchResult r = reader.fetch(req, one_tensor(got), false);
    EXPECT_EQ(got, original);
    EXPECT_EQ(r.stats.checksum_mismatches, 0u);
    publisher.release(*published, false);
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
