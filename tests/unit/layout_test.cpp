#include <gtest/gtest.h>

#include "common/error.hpp"
#include "common/layout.hpp"

using namespace th;

static TensorSpec spec(const std::string &name, th_dtype dt, std::vector<int64_t> shape) {
    TensorSpec t{name, dt, shape, 0};
    t.nbytes = expected_nbytes(dt, shape);
    return t;
}

TEST(Layout, OffsetsAndChunks) {
    Layout l({spec("a", TH_DTYPE_FLOAT32, {1000}), spec("b", TH_DTYPE_UINT8, {5000}), spec("c", TH_DTYPE_INT64, {10})},
             4096);
    EXPECT_EQ(l.total_bytes(), 4000u + 5000u + 80u);
    EXPECT_EQ(l.num_chunks(), 3u);
    EXPECT_EQ(l.tensor_offset(1), 4000u);
    EXPECT_EQ(l.tensor_offset(2), 9000u);
    EXPECT_EQ(l.chunk_end(2), 9080u);
    EXPECT_EQ(l.find("b"), 1);
    EXPECT_EQ(l.find("zz"), -1);
}

TEST(Layout, SegmentsSpanTensors) {
    Layout l({spec("a", TH_DTYPE_UINT8, {3000}), spec("b", TH_DTYPE_UINT8, {3000}), spec("c", TH_DTYPE_UINT8, {3000})},
             4096);
    auto segs = l.segments(l.chunk_begin(0), l.chunk_end(0));
    ASSERT_EQ(segs.size(), 2u);
    EXPECT_EQ(segs[0].tensor, 0u);
    EXPECT_EQ(segs[0].offset, 0u);
    EXPECT_EQ(segs[0].length, 3000u);
    EXPECT_EQ(segs[1].tensor, 1u);
    EXPECT_EQ(segs[1].offset, 0u);
    EXPECT_EQ(segs[1].length, 1096u);
    segs = l.segments(l.chunk_begin(1), l.chunk_end(1));
    ASSERT_EQ(segs.size(), 2u);
    EXPECT_EQ(segs[0].tensor, 1u);
    EXPECT_EQ(segs[0].offset, 1096u);
    EXPECT_EQ(segs[1].tensor, 2u);
    // Segments of all chunks cover every byte exactly once.
    uint64_t covered = 0;
    for (uint32_t c = 0; c < l.num_chunks(); ++c)
        for (auto &s : l.segments(l.chunk_begin(c), l.chunk_end(c))) covered += s.length;
    EXPECT_EQ(covered, l.total_bytes());
}

TEST(Layout, ChunksCoveringARange) {
    Layout l({spec("a", TH_DTYPE_UINT8, {10000})}, 4096);
    EXPECT_EQ(l.chunks_covering(0, 1), std::make_pair(0u, 1u));
    EXPECT_EQ(l.chunks_covering(4095, 4097), std::make_pair(0u, 2u));
    EXPECT_EQ(l.chunks_covering(8192, 10000), std::make_pair(2u, 3u));
}

TEST(Layout, RejectsBadInput) {
    auto code = [](auto fn) {
        try {
            fn();
        } catch (const Error &e) {
            return e.code();
        }
        return TH_OK;
    };
    EXPECT_EQ(code([] { Layout({}, 4096); }), TH_ERR_INVALID_ARG);
    EXPECT_EQ(code([] { Layout({spec("a", TH_DTYPE_UINT8, {10})}, 100); }), TH_ERR_INVALID_ARG);  // chunk too small
    EXPECT_EQ(code([] { Layout({spec("a", TH_DTYPE_UINT8, {10}), spec("a", TH_DTYPE_UINT8, {10})}, 4096); }),
              TH_ERR_INVALID_ARG);  // duplicate name
    EXPECT_EQ(code([] { Layout({TensorSpec{"a", TH_DTYPE_FLOAT32, {10}, 39}}, 4096); }), TH_ERR_INVALID_ARG);
    EXPECT_EQ(code([] { expected_nbytes(TH_DTYPE_UINT8, {-1}); }), TH_ERR_INVALID_ARG);
    EXPECT_EQ(code([] { expected_nbytes(TH_DTYPE_FLOAT64, {1ll << 40, 1ll << 40}); }), TH_ERR_INVALID_ARG);
    try {
        Layout({TensorSpec{"w", TH_DTYPE_FLOAT32, {10}, 39}}, 4096);
    } catch (const Error &e) {
        EXPECT_NE(std::string(e.what()).find("'w'"), std::string::npos) << e.what();
    }
}

TEST(Layout, DescribesMismatch) {
    std::vector<TensorSpec> a = {spec("x", TH_DTYPE_FLOAT32, {4}), spec("y", TH_DTYPE_FLOAT32, {8})};
    EXPECT_EQ(describe_mismatch(a, a), "");
    auto b = a;
    b[1] = spec("y", TH_DTYPE_FLOAT32, {4});
    EXPECT_NE(describe_mismatch(a, b).find("'y' has 32 bytes, 16 given"), std::string::npos);
    b = a;
    b[0].name = "z";
    EXPECT_NE(describe_mismatch(a, b).find("'z' given"), std::string::npos);
    b = a;
    b[0] = spec("x", TH_DTYPE_INT32, {4});
    EXPECT_NE(describe_mismatch(a, b).find("int32 given"), std::string::npos);
    b.pop_back();
    EXPECT_NE(describe_mismatch(a, b).find("2 tensors, 1 given"), std::string::npos);
}
