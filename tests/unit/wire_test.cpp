#include <gtest/gtest.h>

#include <random>

#include "common/error.hpp"
#include "messages.hpp"

using namespace th;
using namespace th::test;

TEST(Wire, RoundTrip) {
    auto ts = specs(1000, 3, TH_DTYPE_FLOAT32);
    Bytes m = publish(42, 7, "policy", 5, 1, 2, ts, 99);
    const Envelope *e = env(m);
    EXPECT_EQ(e->request_id(), 7u);
    EXPECT_EQ(e->worker_id(), 42u);
    ASSERT_EQ(e->body_type(), Body::Publish);
    const Publish *p = e->body_as_Publish();
    EXPECT_EQ(p->model()->str(), "policy");
    EXPECT_EQ(p->version(), 5u);
    EXPECT_EQ(p->shard(), 1u);
    EXPECT_EQ(p->num_shards(), 2u);
    EXPECT_EQ(get_tensors(p->tensors()), ts);
    th::ReplicaDesc d = get_desc(p->replica());
    EXPECT_EQ(d.regions.size(), 2u);
    EXPECT_EQ(d.places.size(), 3u);
    EXPECT_EQ(d.places[2].offset, 2000u);
    EXPECT_NO_THROW(check_desc(d, ts));
}

TEST(Wire, VerifierRejectsTruncatedAndGarbage) {
    // The last few bytes can be alignment padding, so cutting those may leave
    // a valid message; cutting into the data must not.
    Bytes m = publish(42, 7, "policy", 5, 0, 1, specs(100), 99);
    for (size_t n : {size_t(0), size_t(4), m.size() / 2, m.size() - 16}) {
        try {
            verify(m.data(), n);
            ADD_FAILURE() << "accepted " << n << " of " << m.size() << " bytes";
        } catch (const Error &e) {
            EXPECT_EQ(e.code(), TH_ERR_PROTOCOL);
        }
    }
    std::mt19937 rng(1);
    int rejected = 0;
    for (int i = 0; i < 2000; ++i) {
        Bytes g(16 + rng() % 512);
        for (auto &x : g) x = static_cast<uint8_t>(rng());
        try {
            verify(g.data(), g.size());
        } catch (const Error &e) {
            EXPECT_EQ(e.code(), TH_ERR_PROTOCOL);
            rejected++;
        }
    }
    EXPECT_EQ(rejected, 2000);
}

TEST(Wire, SingleByteCorruptionNeverCrashesTheDecoder) {
    // Whatever passes the verifier must decode without reading out of bounds;
    // value changes are caught by the handlers' range checks.
    Bytes m = publish(42, 7, "policy", 5, 0, 1, specs(100), 99);
    for (size_t i = 0; i < m.size(); ++i) {
        Bytes c = m;
        c[i] ^= 0x5a;
        try {
            const Envelope *e = verify(c.data(), c.size());
            if (e->body_type() == Body::Publish) {
                get_tensors(e->body_as_Publish()->tensors());
                get_desc(e->body_as_Publish()->replica());
            }
        } catch (const Error &e) {
            EXPECT_EQ(e.code(), TH_ERR_PROTOCOL);
        }
    }
}

TEST(Wire, RejectsOtherProtocolVersion) {
    Builder b;
    auto env = CreateEnvelope(b, kProtocolVersion + 1, 1, 1, 0, Body::Heartbeat, CreateHeartbeat(b).Union());
    b.Finish(env);
    try {
        verify(b.GetBufferPointer(), b.GetSize());
        FAIL();
    } catch (const Error &e) {
        EXPECT_EQ(e.code(), TH_ERR_PROTOCOL);
        EXPECT_NE(std::string(e.what()).find("protocol version"), std::string::npos);
    }
}

TEST(Wire, RejectsBadTensorValues) {
    Builder b;
    std::vector<int64_t> shape = {4};
    std::vector<flatbuffers::Offset<wire::TensorSpec>> bad = {
        CreateTensorSpec(b, b.CreateString("x"), /*dtype=*/77, b.CreateVector(shape), 4)};
    auto v = b.CreateVector(bad);
    b.Finish(v);
    auto *decoded = flatbuffers::GetRoot<flatbuffers::Vector<flatbuffers::Offset<wire::TensorSpec>>>(b.GetBufferPointer());
    EXPECT_THROW(get_tensors(decoded), Error);
    auto good = specs(100);
    th::ReplicaDesc d = desc_for(good);
    d.places[1].offset = 1u << 30;  // outside the region
    EXPECT_THROW(check_desc(d, good), Error);
    d = desc_for(good);
    d.ctrl_region = 5;
    EXPECT_THROW(check_desc(d, good), Error);
}
