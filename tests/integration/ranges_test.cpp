// th_fetch_ranges: readers of another tensor-parallel degree fetch row and
// column blocks of a version published as 2 shards, in one fetch per shard,
// and only those bytes move. In one process, public API only.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "harness.hpp"

namespace {

using namespace th_test;

constexpr uint64_t kRows = 64, kCols = 4096;  // full tensors, float32: 16 KiB rows
constexpr uint64_t kChunk = 4096;

// Element (r, c) of a full tensor holds r * kCols + c + salt.
uint32_t value(uint64_t r, uint64_t c, uint32_t salt) { return static_cast<uint32_t>(r * kCols + c + salt); }

th_tensor view2d(const char *name, std::vector<uint32_t> &buf, uint64_t rows, uint64_t cols) {
    th_tensor t{};
    t.name = name;
    t.dtype = TH_DTYPE_FLOAT32;
    t.ndim = 2;
    t.shape[0] = static_cast<int64_t>(rows);
    t.shape[1] = static_cast<int64_t>(cols);
    t.data = buf.data();
    t.nbytes = buf.size() * 4;
    t.mem_kind = TH_MEM_HOST;
    return t;
}

th_range range(const char *tensor, void *dst, uint64_t dst_bytes, uint64_t offset, uint64_t row_bytes,
               uint64_t rows = 1, uint64_t src_stride = 0, uint64_t dst_stride = 0) {
    th_range r{};
    r.tensor = tensor;
    r.offset = offset;
    r.row_bytes = row_bytes;
    r.rows = rows;
    r.src_stride = src_stride;
    r.dst = dst;
    r.dst_stride = dst_stride;
    r.dst_bytes = dst_bytes;
    r.mem_kind = TH_MEM_HOST;
    return r;
}

// A version published as TP=2: "col" split along columns (shard s holds
// columns [s * kCols/2, (s+1) * kCols/2)), "row" along rows.
class Ranges : public ::testing::Test {
  protected:
    void SetUp() override {
        server = start_server();
        url = th_server_url(server);
        pub = connect(url, "pub");
        reader = connect(url, "reader");
        for (uint32_t s = 0; s < 2; ++s) {
            col[s].resize(kRows * kCols / 2);
            row[s].resize(kRows / 2 * kCols);
            for (uint64_t r = 0; r < kRows; ++r)
                for (uint64_t c = 0; c < kCols / 2; ++c) col[s][r * kCols / 2 + c] = value(r, s * kCols / 2 + c, 1);
            for (uint64_t r = 0; r < kRows / 2; ++r)
                for (uint64_t c = 0; c < kCols; ++c) row[s][r * kCols + c] = value(s * kRows / 2 + r, c, 2);
            th_tensor views[2] = {view2d("col", col[s], kRows, kCols / 2), view2d("row", row[s], kRows / 2, kCols)};
            th_publish_config pc;
            th_publish_config_init(&pc, sizeof pc);
            pc.model = "tp";
            pc.version = 1;
            pc.shard = s;
            pc.num_shards = 2;
            pc.chunk_bytes = kChunk;
            ASSERT_EQ(th_publish(pub, &pc, views, 2, &rep[s]), TH_OK) << th_last_error();
        }
    }
    void TearDown() override {
        for (th_replica *r : rep) th_replica_release(r);
        th_client_destroy(reader);
        th_client_destroy(pub);
        th_server_destroy(server);
    }
    th_status fetch_ranges(uint32_t shard, std::vector<th_range> ranges, th_sync_stats *stats = nullptr,
                           th_client *c = nullptr) {
        th_fetch_config fc;
        th_fetch_config_init(&fc, sizeof fc);
        fc.model = "tp";
        fc.shard = shard;
        fc.stats = stats;
        // Whole chunks are checked against the publisher's checksums; the
        // parts of chunks a range holds are not (they would never match).
        fc.verify = TH_VERIFY_ALL;
        uint64_t got = 0;
        th_status st = th_fetch_ranges(c ? c : reader, &fc, ranges.data(), ranges.size(), &got);
        if (st == TH_OK) EXPECT_EQ(got, 1u);
        return st;
    }
    th_server *server = nullptr;
    std::string url;
    th_client *pub = nullptr, *reader = nullptr;
    std::vector<uint32_t> col[2], row[2];
    th_replica *rep[2] = {nullptr, nullptr};
};

}  // namespace

TEST_F(Ranges, Tp4RankTakesHalfOfOneTp2ShardInOneFetch) {
    // TP=4 rank 1: columns [1024, 2048) of "col" and rows [16, 32) of "row",
    // both inside shard 0.
    const uint64_t w = kCols / 4, h = kRows / 4;
    std::vector<uint32_t> my_col(kRows * w, 0), my_row(h * kCols, 0);
    th_sync_stats stats;
    th_sync_stats_init(&stats, sizeof stats);
    ASSERT_EQ(fetch_ranges(0,
                           {range("col", my_col.data(), my_col.size() * 4, w * 4, w * 4, kRows, kCols / 2 * 4),
                            range("row", my_row.data(), my_row.size() * 4, h * kCols * 4, h * kCols * 4)},
                           &stats),
              TH_OK)
        << th_last_error();
    for (uint64_t r = 0; r < kRows; ++r)
        for (uint64_t c = 0; c < w; ++c) ASSERT_EQ(my_col[r * w + c], value(r, w + c, 1)) << r << "," << c;
    for (uint64_t r = 0; r < h; ++r)
        for (uint64_t c = 0; c < kCols; ++c) ASSERT_EQ(my_row[r * kCols + c], value(h + r, c, 2)) << r << "," << c;
    // Only those bytes moved: half of each 8 KiB row of "col" (one 4 KiB chunk
    // of two) and a quarter of "row" (16 of its 64 chunks).
    EXPECT_EQ(stats.bytes, (my_col.size() + my_row.size()) * 4);
    EXPECT_EQ(stats.chunks, kRows + h * kCols * 4 / kChunk);
    EXPECT_EQ(stats.version, 1u);
    EXPECT_EQ(stats.bytes_from_publisher, stats.bytes);
    EXPECT_EQ(stats.checksum_mismatches, 0u);
    EXPECT_EQ(stats.failed_sources, 0u);
}

TEST_F(Ranges, Tp1ReaderGathersBothShardsIntoOneTensor) {
    std::vector<uint32_t> full_col(kRows * kCols, 0), full_row(kRows * kCols, 0);
    uint64_t half = kCols / 2 * 4, pitch = kCols * 4;
    uint64_t bytes = 0;
    for (uint32_t s = 0; s < 2; ++s) {
        uint8_t *col_dst = reinterpret_cast<uint8_t *>(full_col.data()) + s * half;
        uint8_t *row_dst = reinterpret_cast<uint8_t *>(full_row.data()) + s * kRows / 2 * pitch;
        th_sync_stats stats;
        th_sync_stats_init(&stats, sizeof stats);
        // Each shard's column half lands inside the full rows: dst_stride is
        // the full row pitch, and dst_bytes what is left of the tensor.
        ASSERT_EQ(fetch_ranges(s,
                               {range("col", col_dst, full_col.size() * 4 - s * half, 0, half, kRows, half, pitch),
                                range("row", row_dst, kRows / 2 * pitch, 0, kRows / 2 * pitch)},
                               &stats),
                  TH_OK)
            << th_last_error();
        bytes += stats.bytes;
    }
    for (uint64_t r = 0; r < kRows; ++r)
        for (uint64_t c = 0; c < kCols; ++c) {
            ASSERT_EQ(full_col[r * kCols + c], value(r, c, 1)) << r << "," << c;
            ASSERT_EQ(full_row[r * kCols + c], value(r, c, 2)) << r << "," << c;
        }
    EXPECT_EQ(bytes, 2 * kRows * kCols * 4);
}

TEST_F(Ranges, ServedByAReadersReplicaOnceThePublisherLeft) {
    // Another reader holds shard 1 whole and serves it; the publisher goes.
    th_client *relay = connect(url, "relay");
    std::vector<uint32_t> c1(col[1].size()), r1(row[1].size());
    th_tensor views[2] = {view2d("col", c1, kRows, kCols / 2), view2d("row", r1, kRows / 2, kCols)};
    th_fetch_config fc;
    th_fetch_config_init(&fc, sizeof fc);
    fc.model = "tp";
    fc.shard = 1;
    th_replica *relayed = nullptr;
    ASSERT_EQ(th_fetch(relay, &fc, views, 2, nullptr, &relayed), TH_OK) << th_last_error();
    th_replica_release(rep[1]);
    rep[1] = nullptr;

    std::vector<uint32_t> last_col(kRows);  // the last column, one element per row
    th_sync_stats stats;
    th_sync_stats_init(&stats, sizeof stats);
    ASSERT_EQ(fetch_ranges(1, {range("col", last_col.data(), kRows * 4, (kCols / 2 - 1) * 4, 4, kRows, kCols / 2 * 4)},
                           &stats),
              TH_OK)
        << th_last_error();
    for (uint64_t r = 0; r < kRows; ++r) ASSERT_EQ(last_col[r], value(r, kCols - 1, 1)) << r;
    EXPECT_EQ(stats.bytes, kRows * 4);
    EXPECT_EQ(stats.bytes_from_replicas, kRows * 4);
    th_replica_release(relayed);
    th_client_destroy(relay);
}

TEST_F(Ranges, ProgressCountsTheRangesBytes) {
    std::vector<uint32_t> dst(kRows * 8);
    struct Seen {
        uint64_t done = 0, total = 0;
        int calls = 0;
    } seen;
    th_fetch_config fc;
    th_fetch_config_init(&fc, sizeof fc);
    fc.model = "tp";
    fc.progress_interval_ms = 0;
    fc.progress_user_data = &seen;
    fc.progress = [](uint64_t done, uint64_t total, void *user) {
        auto *s = static_cast<Seen *>(user);
        s->done = done;
        s->total = total;
        s->calls++;
    };
    th_range r = range("col", dst.data(), dst.size() * 4, 100 * 4, 8 * 4, kRows, kCols / 2 * 4);
    ASSERT_EQ(th_fetch_ranges(reader, &fc, &r, 1, nullptr), TH_OK) << th_last_error();
    EXPECT_GE(seen.calls, 1);
    EXPECT_EQ(seen.total, dst.size() * 4);
    EXPECT_EQ(seen.done, seen.total);
}

TEST_F(Ranges, ErrorsNameTheRangeAndTheTensor) {
    std::vector<uint32_t> dst(kRows * kCols);
    const uint64_t n = dst.size() * 4;
    EXPECT_ERROR(fetch_ranges(0, {range("col", dst.data(), n, 0, 64), range("nope", dst.data(), n, 0, 64)}),
                 TH_ERR_NOT_FOUND, "range 1: the shard has no tensor named 'nope'");
    // Columns [2040, 2056) of a shard that has 2048.
    EXPECT_ERROR(fetch_ranges(0, {range("col", dst.data(), n, 2040 * 4, 16 * 4, kRows, kCols / 2 * 4)}),
                 TH_ERR_INVALID_ARG, "outside tensor 'col' of 524288 bytes");
    EXPECT_ERROR(fetch_ranges(0, {range("row", dst.data(), n, 1 << 19, 1)}), TH_ERR_INVALID_ARG,
                 "bytes [524288, 524289) are outside tensor 'row'");
    EXPECT_ERROR(fetch_ranges(0, {range("col", dst.data(), 1000, 0, 64, kRows, kCols / 2 * 4)}), TH_ERR_INVALID_ARG,
                 "range 0 of tensor 'col': the destination holds 1000 bytes");
    EXPECT_ERROR(fetch_ranges(0, {range("col", dst.data(), n, 0, 64, 0)}), TH_ERR_INVALID_ARG, "rows is 0");
    EXPECT_ERROR(fetch_ranges(0, {range("col", dst.data(), n, 0, 64, 2, 32)}), TH_ERR_INVALID_ARG,
                 "src_stride 32 is shorter");
    EXPECT_ERROR(fetch_ranges(0, {range("col", nullptr, n, 0, 64)}), TH_ERR_INVALID_ARG, "null data pointer");
    EXPECT_ERROR(fetch_ranges(0, {range(nullptr, dst.data(), n, 0, 64)}), TH_ERR_INVALID_ARG, "range 0 has no tensor name");
    EXPECT_ERROR(fetch_ranges(5, {range("col", dst.data(), n, 0, 64)}), TH_ERR_INVALID_ARG, "shard 5 is out of range");

    th_fetch_config fc;
    th_fetch_config_init(&fc, sizeof fc);
    fc.model = "tp";
    th_range r = range("col", dst.data(), n, 0, 64);
    EXPECT_ERROR(th_fetch_ranges(reader, &fc, nullptr, 0, nullptr), TH_ERR_INVALID_ARG, "no ranges given");
    fc.tensor = "col";
    EXPECT_ERROR(th_fetch_ranges(reader, &fc, &r, 1, nullptr), TH_ERR_INVALID_ARG, "tensor must be NULL");
    fc.tensor = nullptr;
    EXPECT_ERROR(th_fetch_ranges(nullptr, &fc, &r, 1, nullptr), TH_ERR_INVALID_ARG, "client is NULL");
    fc.model = "nope";
    EXPECT_ERROR(th_fetch_ranges(reader, &fc, &r, 1, nullptr), TH_ERR_NOT_FOUND, "'nope'");
}
