// RangeSelection: which chunks a ranged fetch reads and where each piece lands.
// A simulated fetch (copying every chunk's pieces out of a flat shard) must
// produce exactly what a plain strided copy does, and read only the bytes
// asked for.
#include <gtest/gtest.h>

#include <cstring>
#include <algorithm>
#include <random>

#include "client/range_selection.hpp"
#include "common/error.hpp"

using namespace th;

namespace {

// Qualified: in a unity build messages.hpp (using namespace th::wire) adds wire::TensorSpec.
th::TensorSpec spec(const std::string &name, std::vector<int64_t> shape) {
    th::TensorSpec t{name, TH_DTYPE_FLOAT32, shape, 0};
    t.nbytes = expected_nbytes(t.dtype, t.shape);
    return t;
}

// A flat shard whose byte i is a function of i, and the result of a fetch
// simulated chunk by chunk through the selection.
struct Sim {
    Layout layout;
    std::vector<uint8_t> flat;
    std::vector<std::vector<uint8_t>> dst;
    uint64_t bytes_read = 0;

    Sim(Layout l) : layout(std::move(l)), flat(layout.total_bytes()) {
        for (size_t i = 0; i < flat.size(); ++i) flat[i] = static_cast<uint8_t>(i * 131 + (i >> 8) * 7);
    }
    void run(const std::vector<RangeRequest> &ranges) {
        RangeSelection sel(layout, ranges);
        dst.clear();
        for (const RangeRequest &r : ranges) dst.emplace_back(dst_span(r), 0xEE);
        for (uint32_t c = 0; c < layout.num_chunks(); ++c) {
            auto pieces = sel.pieces(c);
            bool touched = std::binary_search(sel.chunks().begin(), sel.chunks().end(), c);
            EXPECT_EQ(touched, !pieces.empty()) << "chunk " << c;
            for (const RangePiece &p : pieces) {
                uint64_t at = layout.tensor_offset(p.tensor) + p.offset;
                EXPECT_GE(at, layout.chunk_begin(c));
                EXPECT_LE(at + p.length, layout.chunk_end(c));
                std::memcpy(dst[p.range].data() + p.dst_offset, flat.data() + at, p.length);
                bytes_read += p.length;
            }
        }
        EXPECT_EQ(bytes_read, sel.bytes());
    }
    // What range r should have put into its destination.
    std::vector<uint8_t> expected(const RangeRequest &r) const {
        std::vector<uint8_t> out(dst_span(r), 0xEE);
        uint64_t base = layout.tensor_offset(layout.find(r.tensor)) + r.offset;
        uint64_t ds = r.dst_stride ? r.dst_stride : r.row_bytes;
        for (uint64_t i = 0; i < r.rows; ++i)
            std::memcpy(out.data() + i * ds, flat.data() + base + i * (r.rows > 1 ? r.src_stride : 0), r.row_bytes);
        return out;
    }
};

RangeRequest columns(const std::string &name, uint64_t rows, uint64_t cols, uint64_t c0, uint64_t c1,
                     uint64_t dst_stride = 0) {
    RangeRequest r;
    r.tensor = name;
    r.offset = c0 * 4;
    r.row_bytes = (c1 - c0) * 4;
    r.rows = rows;
    r.src_stride = cols * 4;
    r.dst_stride = dst_stride;
    return r;
}

}  // namespace

TEST(RangeSelection, ContiguousRangeReadsOnlyItsChunks) {
    Sim s(Layout({spec("a", {4096}), spec("b", {8192})}, 4096));  // 16 KiB + 32 KiB, 12 chunks
    RangeRequest r;
    r.tensor = "b";
    r.offset = 5000;
    r.row_bytes = 9000;
    s.run({r});
    EXPECT_EQ(s.dst[0], s.expected(r));
    RangeSelection sel(s.layout, {r});
    // b starts at 16384: bytes [21384, 30384) lie in chunks 5..7.
    EXPECT_EQ(sel.chunks(), (std::vector<uint32_t>{5, 6, 7}));
    EXPECT_EQ(sel.bytes(), 9000u);
}

TEST(RangeSelection, ColumnBlockOfARowMajorTensor) {
    // [64, 2048] float32: 8 KiB rows, 4 KiB chunks. Columns [1024, 1536) of
    // every row are 2 KiB in the first half of each row's second chunk.
    Sim s(Layout({spec("w", {64, 2048})}, 4096));
    RangeRequest r = columns("w", 64, 2048, 1024, 1536);
    s.run({r});
    EXPECT_EQ(s.dst[0], s.expected(r));
    RangeSelection sel(s.layout, {r});
    EXPECT_EQ(sel.bytes(), 64u * 2048);
    ASSERT_EQ(sel.chunks().size(), 64u);  // one chunk of two per row is never read
    for (uint32_t c : sel.chunks()) EXPECT_EQ(c % 2, 1u);
    auto p = sel.pieces(3);
    ASSERT_EQ(p.size(), 1u);
    EXPECT_EQ(p[0].offset, 8192u + 4096);
    EXPECT_EQ(p[0].length, 2048u);
    EXPECT_EQ(p[0].dst_offset, 2048u);
}

TEST(RangeSelection, ColumnsGatherIntoAWiderDestination) {
    // Two shards' column halves land side by side in one [R, 2C] tensor: the
    // second with dst pointing C columns in and the full row pitch as stride.
    Sim s(Layout({spec("w", {10, 300})}, 4096));
    RangeRequest r = columns("w", 10, 300, 0, 300, 600 * 4);
    s.run({r});
    EXPECT_EQ(s.dst[0], s.expected(r));
    for (uint64_t row = 0; row < 9; ++row)  // the gaps are untouched
        for (uint64_t b = 1200; b < 2400; ++b) ASSERT_EQ(s.dst[0][row * 2400 + b], 0xEE);
}

TEST(RangeSelection, RowsBackToBackOnBothSidesAreOneRun) {
    Sim s(Layout({spec("w", {16, 1024})}, 4096));
    RangeRequest r = columns("w", 4, 1024, 0, 1024);  // 4 whole rows: contiguous
    r.offset = 2 * 4096;
    RangeSelection sel(s.layout, {r});
    auto p = sel.pieces(3);
    ASSERT_EQ(p.size(), 1u);
    EXPECT_EQ(p[0].length, 4096u);
    s.run({r});
    EXPECT_EQ(s.dst[0], s.expected(r));
}

TEST(RangeSelection, RandomRangesMatchAStridedCopy) {
    std::mt19937_64 rng(7);
    for (int round = 0; round < 200; ++round) {
        uint64_t chunk = 4096u << (rng() % 3);
        std::vector<th::TensorSpec> specs;
        int n = 1 + static_cast<int>(rng() % 4);
        for (int t = 0; t < n; ++t)
            specs.push_back(spec(th::str("t", t), {int64_t(1 + rng() % 40), int64_t(1 + rng() % 700)}));
        Sim s(Layout(specs, chunk));
        std::vector<RangeRequest> ranges;
        int k = 1 + static_cast<int>(rng() % 5);
        for (int i = 0; i < k; ++i) {
            const th::TensorSpec &t = specs[rng() % specs.size()];
            uint64_t rows = t.shape[0], cols = t.shape[1];
            uint64_t r0 = rng() % rows, r1 = r0 + 1 + rng() % (rows - r0);
            uint64_t c0 = rng() % cols, c1 = c0 + 1 + rng() % (cols - c0);
            RangeRequest r = columns(t.name, r1 - r0, cols, c0, c1, rng() % 2 ? 0 : (c1 - c0 + rng() % 5) * 4);
            r.offset += r0 * cols * 4;
            ranges.push_back(r);
        }
        s.run(ranges);
        for (size_t i = 0; i < ranges.size(); ++i)
            ASSERT_EQ(s.dst[i], s.expected(ranges[i])) << "round " << round << " range " << i;
    }
}

TEST(RangeSelection, ErrorsNameTheRangeAndTheTensor) {
    Layout l({spec("w", {8, 100})}, 4096);
    auto error = [&](std::vector<RangeRequest> r) -> std::pair<th_status, std::string> {
        try {
            RangeSelection sel(l, r);
        } catch (const Error &e) {
            return {e.code(), e.what()};
        }
        return {TH_OK, ""};
    };
    RangeRequest ok = columns("w", 8, 100, 10, 20);
    EXPECT_EQ(error({ok}).first, TH_OK);
    RangeRequest unknown = ok;
    unknown.tensor = "nope";
    auto e = error({ok, unknown});
    EXPECT_EQ(e.first, TH_ERR_NOT_FOUND);
    EXPECT_NE(e.second.find("range 1"), std::string::npos) << e.second;
    EXPECT_NE(e.second.find("'nope'"), std::string::npos) << e.second;
    RangeRequest past = columns("w", 8, 100, 90, 101);  // column 100 does not exist
    e = error({past});
    EXPECT_EQ(e.first, TH_ERR_INVALID_ARG);
    EXPECT_NE(e.second.find("outside tensor 'w' of 3200 bytes"), std::string::npos) << e.second;
    RangeRequest flat;
    flat.tensor = "w";
    flat.offset = 3000;
    flat.row_bytes = 201;
    e = error({flat});
    EXPECT_NE(e.second.find("bytes [3000, 3201) are outside tensor 'w'"), std::string::npos) << e.second;
}

TEST(RangeSelection, ChecksWithoutTheLayout) {
    auto message = [](const RangeRequest &r, uint64_t dst_bytes) -> std::string {
        try {
            check_range(r, dst_bytes, 3);
        } catch (const Error &e) {
            EXPECT_EQ(e.code(), TH_ERR_INVALID_ARG);
            return e.what();
        }
        return "";
    };
    RangeRequest r = columns("w", 8, 100, 10, 20);
    EXPECT_EQ(message(r, dst_span(r)), "");
    EXPECT_EQ(dst_span(r), 8u * 40);
    EXPECT_NE(message(r, dst_span(r) - 1).find("range 3 of tensor 'w': the destination holds 319 bytes"),
              std::string::npos);
    RangeRequest zero = r;
    zero.rows = 0;
    EXPECT_NE(message(zero, 1000).find("rows is 0"), std::string::npos);
    zero = r;
    zero.row_bytes = 0;
    EXPECT_NE(message(zero, 1000).find("row_bytes is 0"), std::string::npos);
    RangeRequest overlap = r;
    overlap.src_stride = 10;
    EXPECT_NE(message(overlap, 1000).find("src_stride 10 is shorter"), std::string::npos);
    overlap = r;
    overlap.dst_stride = 39;
    EXPECT_NE(message(overlap, 1000).find("dst_stride 39 is shorter"), std::string::npos);
    RangeRequest huge = r;
    huge.rows = 1ull << 40;
    huge.src_stride = 1ull << 40;
    EXPECT_NE(message(huge, 1000).find("2^64"), std::string::npos);
}
