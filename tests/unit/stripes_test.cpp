// Striped plans (docs/design.md, "Fan-out depth"): the stripe arithmetic,
// the per-stripe fill levels a serving reader's control word reports, and
// the trees the server builds when many readers that serve plan at once.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>
#include <set>

#include "client/control_word.hpp"
#include "client/fetch_source.hpp"
#include "common/stripes.hpp"
#include "messages.hpp"
#include "server/service.hpp"

using namespace th;
using namespace th::test;

TEST(Stripes, CoverTheShardInOrderAndAgreeWithStripeOf) {
    for (uint32_t n : {4u, 7u, 32u, 33u, 100u, 1000u, 4097u})
        for (uint32_t wanted : {1u, 2u, 3u, 8u, 11u, 64u}) {
            uint32_t k = stripes_for(n, wanted);
            ASSERT_GE(k, 1u);
            ASSERT_LE(k, std::min(wanted, kMaxStripes));
            if (k > 1) {
                ASSERT_GE(n / k, kMinStripeChunks) << n << " " << k;
            }
            EXPECT_EQ(stripe_begin(n, k, 0), 0u);
            EXPECT_EQ(stripe_begin(n, k, k), n);
            for (uint32_t i = 0; i < k; ++i) {
                uint32_t b = stripe_begin(n, k, i), e = stripe_begin(n, k, i + 1);
                ASSERT_LT(b, e);
                for (uint32_t c = b; c < e; ++c) ASSERT_EQ(stripe_of(n, k, c), i) << n << " " << k << " " << c;
            }
        }
    EXPECT_EQ(stripes_for(8, 8), 2u);  // few chunks: fewer, longer stripes
    EXPECT_EQ(stripes_for(3, 8), 1u);
}

namespace {

std::vector<uint8_t> block(uint64_t gen, uint64_t leading, uint32_t k, std::vector<uint32_t> done) {
    std::vector<uint8_t> b(kControlBlockBytes, 0);
    std::memcpy(b.data(), &gen, 8);
    std::memcpy(b.data() + 8, &leading, 8);
    std::memcpy(b.data() + 16, &k, 4);
    if (!done.empty()) std::memcpy(b.data() + 20, done.data(), done.size() * 4);
    return b;
}

}  // namespace

TEST(FillLevel, ReadsStripesAheadOfTheLeadingRun) {
    // 40 chunks in 4 stripes of 10: the leading 3 chunks, 5 of stripe 1,
    // all of stripe 2, none of stripe 3.
    auto b = block(2, 3, 4, {3, 5, 10, 0});
    FillLevel f = FillLevel::decode(b.data(), kControlBlockBytes, 40);
    EXPECT_EQ(f.leading, 3u);
    EXPECT_EQ(f.held_until(0, 40, 40), 3u);
    EXPECT_EQ(f.held_until(10, 20, 40), 15u);
    EXPECT_EQ(f.held_until(12, 20, 40), 15u);
    EXPECT_EQ(f.held_until(20, 30, 40), 30u);
    EXPECT_EQ(f.held_until(20, 40, 40), 30u);  // runs on into stripe 3, which has nothing
    EXPECT_EQ(f.held_until(30, 40, 40), 30u);
    EXPECT_EQ(f.held_until(16, 20, 40), 16u);  // a chunk it does not hold yet
}

TEST(FillLevel, OlderWordsAndNonsenseMeanTheLeadingRunOnly) {
    auto b = block(2, 7, 4, {10, 10, 10, 10});
    // A 16-byte word (an older holder): stripes are not looked at.
    FillLevel f = FillLevel::decode(b.data(), kControlWordBytes, 40);
    EXPECT_EQ(f.stripes, 0u);
    EXPECT_EQ(f.held_until(0, 40, 40), 7u);
    EXPECT_EQ(f.held_until(20, 40, 40), 20u);
    // Counts above what a word can hold, or above the chunks: ignored or capped.
    for (uint32_t k : {1u, kMaxStripes + 1, 1000u}) {
        auto odd = block(2, 7, k, {});
        EXPECT_EQ(FillLevel::decode(odd.data(), kControlBlockBytes, 40).stripes, 0u) << k;
    }
    auto big = block(2, 1000, 2, {1000, 1000});
    FillLevel capped = FillLevel::decode(big.data(), kControlBlockBytes, 40);
    EXPECT_EQ(capped.leading, 40u);
    EXPECT_EQ(capped.done[0], 20u);
    EXPECT_EQ(capped.held_until(0, 40, 40), 40u);
}

namespace {

std::unique_ptr<FetchSource> source_in(uint32_t stripe, uint32_t next, uint32_t end) {
    auto s = std::make_unique<FetchSource>();
    s->stripe = stripe;
    s->next = next;
    s->end = end;
    return s;
}

}  // namespace

TEST(StripePacing, NoStripeRunsMoreThanTheLeadAheadOfTheLeastAdvanced) {
    // 40 chunks in 4 stripes of 10; lead 2.
    std::vector<std::unique_ptr<FetchSource>> s;
    s.push_back(source_in(0, 6, 10));   // 6 past its start
    s.push_back(source_in(1, 12, 20));  // 2: the least advanced
    s.push_back(source_in(2, 25, 30));  // 5
    EXPECT_EQ(stripe_pace_limit(*s[0], s, 40, 4, 2), 0u + 2 + 2);
    EXPECT_EQ(stripe_pace_limit(*s[2], s, 40, 4, 2), 20u + 2 + 2);
    // The least advanced is held only by the next least advanced.
    EXPECT_EQ(stripe_pace_limit(*s[1], s, 40, 4, 2), 10u + 5 + 2);
    // A source that failed, or has nothing left to ask for, holds no one back.
    s[1]->failed = true;
    EXPECT_EQ(stripe_pace_limit(*s[0], s, 40, 4, 2), 0u + 5 + 2);
    s[2]->next = 30;
    EXPECT_EQ(stripe_pace_limit(*s[0], s, 40, 4, 2), UINT32_MAX);
    // A source planned for the rest of a stripe counts from the stripe's start.
    s.push_back(source_in(3, 33, 40));
    EXPECT_EQ(stripe_pace_limit(*s[0], s, 40, 4, 2), 0u + 3 + 2);
    EXPECT_EQ(stripe_pace_limit(*s[3], s, 40, 4, 2), 30u + 6 + 2);
}

TEST(StripePacing, SourcesOfNoSingleStripeNeitherHoldNorAreHeld) {
    std::vector<std::unique_ptr<FetchSource>> s;
    s.push_back(source_in(FetchSource::kNoStripe, 0, 40));  // a plan of the whole shard
    s.push_back(source_in(2, 29, 30));
    EXPECT_EQ(stripe_pace_limit(*s[0], s, 40, 4, 2), UINT32_MAX);
    EXPECT_EQ(stripe_pace_limit(*s[1], s, 40, 4, 2), UINT32_MAX);
    // Two sources of one stripe (the rest of it, after a replan) pace
    // against the other stripes, not each other.
    s.push_back(source_in(2, 20, 25));
    EXPECT_EQ(stripe_pace_limit(*s[1], s, 40, 4, 2), UINT32_MAX);
}

// Each stripe's relay is a link of its own to keep busy: a striped fetch
// keeps max_inflight reads per stripe, not max_inflight shared by them.
TEST(StripePacing, AStripedFetchKeepsItsReadsInFlightPerStripe) {
    EXPECT_EQ(reads_in_flight_limit(4, 1), 4u);
    EXPECT_EQ(reads_in_flight_limit(4, 0), 4u);  // not striped
    EXPECT_EQ(reads_in_flight_limit(4, 4), 16u);
    EXPECT_EQ(reads_in_flight_limit(8, 8), 64u);
    EXPECT_EQ(reads_in_flight_limit(UINT32_MAX, 8), UINT32_MAX);
}

namespace {

// Drives a Service through the plans of readers that serve, as clients do:
// a first Striped plan for the whole shard, then StripedNow plans for what
// it left out. Records which source each reader has for each chunk.
class StripedPlans : public ::testing::Test {
  protected:
    static constexpr uint32_t kChunks = 64;
    static constexpr uint64_t kChunk = 4096;
    static constexpr uint64_t kPublisher = 1;
    Service svc{[] {
        ServiceConfig c;
        c.policy.stripes = 8;
        return c;
    }()};
    uint64_t req = 1;
    std::vector<th::TensorSpec> ts = specs(kChunks * kChunk / 2);
    std::map<uint64_t, std::vector<uint64_t>> source_of;  // reader -> source worker per chunk (0: none)
    std::map<uint64_t, uint32_t> stripes;                 // as each reader was told

    Bytes call(const Bytes &m) { return svc.handle(m.data(), m.size()); }

    void SetUp() override {
        ASSERT_EQ(error_code(call(hello(kPublisher, req++))), 0);
        ASSERT_EQ(error_code(call(publish(kPublisher, req++, "m", 1, 0, 1, ts, 100, kChunk))), 0);
    }

    void join(uint64_t w) { ASSERT_EQ(error_code(call(hello(w, req++))), 0); }

    // One PlanFetch; returns the ranges (first, count, source worker).
    std::vector<std::tuple<uint32_t, uint32_t, uint64_t>> ask(uint64_t w, uint32_t first, uint32_t count, PlanMode mode,
                                                              std::vector<uint64_t> exclude = {}) {
        Builder b;
        auto d = put_desc(b, desc_for(ts));
        auto body = CreatePlanFetch(b, b.CreateString("m"), 1, 0, first, count, d, 1000 + w, b.CreateVector(exclude),
                                    put_tensors(b, ts), 0, mode);
        Bytes r = call(finish(b, hdr(w, req++), body));
        EXPECT_EQ(env(r)->body_type(), Body::PlanReply) << error_text(r);
        std::vector<std::tuple<uint32_t, uint32_t, uint64_t>> out;
        if (env(r)->body_type() != Body::PlanReply) return out;
        const PlanReply *p = env(r)->body_as_PlanReply();
        stripes[w] = p->stripes();
        auto &src = source_of[w];
        src.resize(kChunks, 0);
        for (const SourceRange *sr : *p->ranges()) {
            out.emplace_back(sr->first_chunk(), sr->num_chunks(), sr->worker_id());
            for (uint32_t c = sr->first_chunk(); c < sr->first_chunk() + sr->num_chunks(); ++c) src[c] = sr->worker_id();
        }
        return out;
    }

    // What a client does after its first plan: asks for each run left out.
    void ask_for_the_rest(uint64_t w) {
        auto &src = source_of[w];
        for (uint32_t c = 0; c < kChunks;) {
            if (src[c] != 0) {
                ++c;
                continue;
            }
            uint32_t e = c;
            while (e < kChunks && src[e] == 0) ++e;
            ask(w, c, e - c, PlanMode::StripedNow);
            c = e;
        }
    }

    void done(uint64_t w) {
        Builder b;
        auto body = CreateFetchDone(b, b.CreateString("m"), 1, 0, 1000 + w, true, 0, 0);
        ASSERT_EQ(error_code(call(finish(b, hdr(w, req++), body))), 0);
    }

    // Each reader's depth per chunk: hops from the publisher along sources.
    // Fails the test on a cycle (a reader waiting on itself).
    uint32_t max_depth() {
        uint32_t deepest = 0;
        for (uint32_t c = 0; c < kChunks; ++c)
            for (const auto &[w, src] : source_of) {
                uint32_t d = 0;
                uint64_t at = w;
                while (at != kPublisher) {
                    EXPECT_NE(source_of[at][c], 0u) << "reader " << at << " has no source for chunk " << c;
                    if (source_of[at][c] == 0) return UINT32_MAX;
                    at = source_of[at][c];
                    if (++d > source_of.size() + 1) {
                        ADD_FAILURE() << "a cycle through chunk " << c << " of reader " << w;
                        return UINT32_MAX;
                    }
                }
                if (d > deepest && getenv("TH_TEST_TRACE")) {
                    std::string path;
                    for (uint64_t x = w; x != kPublisher; x = source_of[x][c]) path += std::to_string(x) + " <- ";
                    std::printf("chunk %u: %s1\n", c, path.c_str());
                }
                deepest = std::max(deepest, d);
            }
        return deepest;
    }

    // How many readers each worker sends each chunk to.
    std::map<uint64_t, uint32_t> sends_of_chunk(uint32_t c) {
        std::map<uint64_t, uint32_t> n;
        for (const auto &[w, src] : source_of) n[src[c]]++;
        return n;
    }
};

}  // namespace

TEST_F(StripedPlans, ReadersReadyTogetherFormShallowTreesAndThePublisherSendsTheShardOnce) {
    const uint64_t n = 64;
    for (uint64_t w = 2; w < 2 + n; ++w) join(w);
    // Everyone plans once (its own stripe, and the stripes that have relays),
    // then asks again for what was left out.
    for (uint64_t w = 2; w < 2 + n; ++w) {
        auto first = ask(w, 0, 0, PlanMode::Striped);
        ASSERT_FALSE(first.empty());
        EXPECT_EQ(stripes[w], 8u);
    }
    for (uint64_t w = 2; w < 2 + n; ++w) ask_for_the_rest(w);
    // The publisher sends every chunk once; no reader sends a chunk to more
    // than a relay's room (8 readers of its stripe: one shard's worth).
    for (uint32_t c = 0; c < kChunks; ++c) {
        auto sends = sends_of_chunk(c);
        EXPECT_EQ(sends[kPublisher], 1u) << "chunk " << c;
        for (const auto &[src, k] : sends) EXPECT_LE(k, 8u) << "worker " << src << " chunk " << c;
    }
    // A chain would be 64 deep; eight trees of eight relays each, with half
    // of each relay's room kept for relays, are at most 4.
    EXPECT_LE(max_depth(), 4u);
    // What each reader uploads: its own stripe to its children, one shard's
    // worth at most, 64 shards in all.
    std::map<uint64_t, uint32_t> sent;
    for (const auto &[w, src] : source_of)
        for (uint64_t s : src) sent[s]++;
    uint32_t total = 0;
    for (const auto &[w, k] : sent) {
        if (w != kPublisher) {
            EXPECT_LE(k, kChunks) << "worker " << w;
        }
        total += k;
    }
    EXPECT_EQ(total, n * kChunks);
}

TEST_F(StripedPlans, WhenAStripesRelaysFallShortAnotherStripesRelayWithRoomSendsItNoRelayBeyondItsRoom) {
    // 71 readers: a stripe has 70 readers besides its root, and its relays
    // (one reader in eight: 8 for one stripe) have 64 places. Six readers of
    // that stripe are sent it by relays of other stripes with room left,
    // rather than by one of its own relays loaded beyond its room (a ninth
    // reader slows the relay's whole subtree to 8/9).
    const uint64_t n = 71;
    for (uint64_t w = 2; w < 2 + n; ++w) join(w);
    for (uint64_t w = 2; w < 2 + n; ++w) ask(w, 0, 0, PlanMode::Striped);
    for (uint64_t w = 2; w < 2 + n; ++w) ask_for_the_rest(w);
    std::map<uint64_t, std::set<uint64_t>> readers_of;  // source -> readers it sends to, any chunk
    for (const auto &[w, src] : source_of)
        for (uint64_t s : src) readers_of[s].insert(w);
    for (const auto &[src, readers] : readers_of)
        if (src != kPublisher) {
            EXPECT_LE(readers.size(), 8u) << "worker " << src;
        }
    for (uint32_t c = 0; c < kChunks; ++c) EXPECT_EQ(sends_of_chunk(c)[kPublisher], 1u) << "chunk " << c;
    EXPECT_LE(max_depth(), 6u);
}

TEST_F(StripedPlans, FewerReadersThanStripesStillSendEachStripeOnceFromThePublisher) {
    for (uint64_t w = 2; w < 5; ++w) join(w);
    for (uint64_t w = 2; w < 5; ++w) ask(w, 0, 0, PlanMode::Striped);
    for (uint64_t w = 2; w < 5; ++w) ask_for_the_rest(w);
    // Stripes nobody relays are read from the publisher by the first reader
    // that needs them; later readers follow it.
    for (uint32_t c = 0; c < kChunks; ++c) EXPECT_EQ(sends_of_chunk(c)[kPublisher], 1u) << "chunk " << c;
    EXPECT_LE(max_depth(), 3u);
}

TEST_F(StripedPlans, ALoneReaderGetsItsStripeFirstThenTheRestInOneRange) {
    join(2);
    auto first = ask(2, 0, 0, PlanMode::Striped);
    ASSERT_EQ(first.size(), 1u);
    EXPECT_EQ(std::get<1>(first[0]), kChunks / 8);  // its own stripe only
    EXPECT_EQ(std::get<2>(first[0]), kPublisher);
    ask_for_the_rest(2);
    std::set<uint64_t> from(source_of[2].begin(), source_of[2].end());
    EXPECT_EQ(from, std::set<uint64_t>{kPublisher});
}

TEST_F(StripedPlans, AStripedPlanWithoutTheReadersOwnStripeIsNeverEmpty) {
    join(2);
    ask(2, 0, 0, PlanMode::Striped);  // home: stripe 0, chunks [0, 8)
    source_of[2].assign(kChunks, 0);
    auto rest = ask(2, 8, kChunks - 8, PlanMode::Striped);
    ASSERT_FALSE(rest.empty());
    for (uint32_t c = 8; c < kChunks; ++c) EXPECT_EQ(source_of[2][c], kPublisher) << c;
}

TEST_F(StripedPlans, AnIdleCompleteHolderServesALateReaderWhole) {
    join(2);
    join(3);
    ask(2, 0, 0, PlanMode::Striped);
    ask_for_the_rest(2);
    done(2);
    auto late = ask(3, 0, 0, PlanMode::Striped);
    ASSERT_EQ(late.size(), 1u);
    EXPECT_EQ(late[0], std::make_tuple(0u, kChunks, uint64_t(2)));
}

TEST_F(StripedPlans, JoinersEachGetAnIdleCompleteHolderOfTheirOwn) {
    for (uint64_t w = 2; w < 18; ++w) join(w);
    for (uint64_t w = 2; w < 10; ++w) {  // holders from before
        ask(w, 0, 0, PlanMode::Striped);
        ask_for_the_rest(w);
    }
    for (uint64_t w = 2; w < 10; ++w) done(w);
    std::set<uint64_t> used;
    for (uint64_t w = 10; w < 18; ++w) {
        auto plan = ask(w, 0, 0, PlanMode::Striped);
        ASSERT_EQ(plan.size(), 1u) << "joiner " << w;
        EXPECT_EQ(std::get<1>(plan[0]), kChunks);
        uint64_t from = std::get<2>(plan[0]);
        EXPECT_TRUE(from >= 2 && from < 10) << from;
        EXPECT_TRUE(used.insert(from).second) << "holder " << from << " given twice";
    }
}

TEST_F(StripedPlans, ReadersThatDoNotAskForStripesGetOneSource) {
    join(2);
    join(3);
    ask(2, 0, 0, PlanMode::Striped);
    auto single = ask(3, 0, 0, PlanMode::Single);
    ASSERT_EQ(single.size(), 1u);
    EXPECT_EQ(std::get<1>(single[0]), kChunks);
    EXPECT_EQ(stripes[3], 1u);
}

TEST_F(StripedPlans, ARelayThatFailsIsReplacedByNoneOfItsDescendants) {
    const uint64_t n = 24;
    for (uint64_t w = 2; w < 2 + n; ++w) join(w);
    for (uint64_t w = 2; w < 2 + n; ++w) ask(w, 0, 0, PlanMode::Striped);
    for (uint64_t w = 2; w < 2 + n; ++w) ask_for_the_rest(w);
    ASSERT_LE(max_depth(), 3u);
    // Every reader whose source for a stripe was reader 2 re-plans it
    // without reader 2, as a client does when a source stops answering.
    for (uint64_t w = 3; w < 2 + n; ++w) {
        auto &src = source_of[w];
        for (uint32_t c = 0; c < kChunks;) {
            if (src[c] != 2) {
                ++c;
                continue;
            }
            uint32_t e = c;
            while (e < kChunks && src[e] == 2) ++e;
            for (uint32_t x = c; x < e; ++x) src[x] = 0;
            ask(w, c, e - c, PlanMode::StripedNow, {2});
            c = e;
        }
    }
    source_of.erase(2);
    for (const auto &[w, src] : source_of)
        for (uint64_t s : src) ASSERT_NE(s, 2u) << "reader " << w;
    EXPECT_LE(max_depth(), 4u);  // no cycle, every chunk has a source
}

// Guarded reads: a generation marked unsettled stays so, whatever the slot's
// later tenants mark; a reader keeps what it got across a change only from a
// guarding holder on the active-message path, and only while the word shows
// no unsettled generation at or above the one it read.
TEST(ControlWord, AReaderKeepsWhatGuardedReadsGotOnlyWhileTheirGenerationSettled) {
    ControlWord w{};
    w.unsettled.store(0);
    w.mark_unsettled(6);
    w.mark_unsettled(4);  // an earlier generation, marked late: no step back
    EXPECT_EQ(w.unsettled.load(), 6u);

    FetchSource s;
    s.desc.ctrl_generation = 8;
    EXPECT_FALSE(s.keeps_across_change(0)) << "not guarded: every change discards";
    s.guarded = true;
    EXPECT_TRUE(s.keeps_across_change(0));
    EXPECT_TRUE(s.keeps_across_change(6)) << "an earlier generation was unsettled, not this one";
    EXPECT_FALSE(s.keeps_across_change(8));
    EXPECT_FALSE(s.keeps_across_change(10)) << "a later one: this one may have been too (the mark only grows)";
    EXPECT_FALSE(s.keeps_across_change(UINT64_MAX)) << "the word was not read";

    // A guarded read that completed well within the holder's wait needs no
    // read of the word; a slow one does, and so does any read of a holder
    // that does not guard.
    EXPECT_TRUE(s.trusts(std::chrono::milliseconds(5)));
    EXPECT_FALSE(s.trusts(std::chrono::milliseconds(kAnswersFinishMs / 2)));
    EXPECT_FALSE(s.trusts(std::chrono::milliseconds(kAnswersFinishMs + 1)));
    s.guarded = false;
    EXPECT_FALSE(s.trusts(std::chrono::milliseconds(5)));
}

// A follower's waiting reads run ahead of its source's level, and a read of
// the source's word then leaves avail at the follower's next chunk. When a
// waiting read comes back unanswered (the source took too long), the chunk
// it asked for is not held: only what the word says is read as held, not
// whatever the source's buffer holds there.
TEST(FetchSource, AWaitThatRunsOutLeavesItsChunkUnheld) {
    FetchSource s;
    s.num_chunks = s.end = 10;
    s.gen_known = s.waits_ok = true;
    FillLevel three;
    three.leading = 3;
    s.saw_fill_level(three);
    EXPECT_EQ(s.avail, 3u);
    s.next = 5;  // waiting reads of chunks 3 and 4 went out
    s.saw_fill_level(three);
    ASSERT_EQ(s.avail, 5u) << "the word is read past its level (the premise of this test)";
    s.not_yet(3);
    EXPECT_EQ(s.next, 3u);
    EXPECT_LE(s.avail, 3u) << "chunk 3 would be read as held";
    EXPECT_FALSE(s.waits_ok);
    EXPECT_TRUE(s.starving());
    FillLevel four;
    four.leading = 4;
    s.saw_fill_level(four);
    EXPECT_EQ(s.avail, 4u);
}
