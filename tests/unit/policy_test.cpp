#include <gtest/gtest.h>

#include "server/policy.hpp"

using namespace th;

namespace {
Labels L(const char *dc, const char *rack, const char *host) { return {{"dc", dc}, {"rack", rack}, {"host", host}}; }
}  // namespace

TEST(Policy, Distance) {
    EXPECT_EQ(distance(L("a", "r1", "h1"), L("a", "r1", "h1")), Distance::SameHost);
    EXPECT_EQ(distance(L("a", "r1", "h1"), L("a", "r1", "h2")), Distance::SameRack);
    EXPECT_EQ(distance(L("a", "r1", "h1"), L("a", "r2", "h2")), Distance::SameDc);
    EXPECT_EQ(distance(L("a", "r1", "h1"), L("b", "r1", "h1")), Distance::OtherDc);
    EXPECT_EQ(distance(Labels{}, Labels{}), Distance::SameDc);
    EXPECT_EQ(distance(Labels{{"dc", "x"}}, Labels{}), Distance::OtherDc);
    EXPECT_EQ(distance(Labels{{"zone", "z"}}, Labels{{"zone", "z"}}), Distance::SameRack);
}

TEST(Policy, PrefersCloserSources) {
    Labels me = L("a", "r1", "h1"), host = L("a", "r1", "h1"), rack = L("a", "r1", "h9"), dc = L("a", "r5", "h5"),
           far = L("b", "r1", "h1");
    std::vector<Candidate> c = {{1, 11, &far, true, 0, 1}, {2, 12, &dc, true, 0, 2}, {3, 13, &rack, true, 0, 3},
                                {4, 14, &host, true, 0, 4}};
    Request r{&me, 99, 0, {}, {}};
    EXPECT_EQ(choose_source(r, c, {}), 3u);
    c.pop_back();
    EXPECT_EQ(choose_source(r, c, {}), 2u);
    c.pop_back();
    EXPECT_EQ(choose_source(r, c, {}), 1u);
    c.pop_back();
    EXPECT_EQ(choose_source(r, c, {}), 0u);
}

TEST(Policy, LeastLoadedThenCap) {
    Labels me = L("a", "r1", "h0"), x = L("a", "r1", "h1"), y = L("a", "r1", "h2");
    // Same distance: fewer active readers wins.
    std::vector<Candidate> c = {{1, 11, &x, true, 3, 1}, {2, 12, &y, true, 1, 2}};
    Request r{&me, 99, 0, {}, {}};
    EXPECT_EQ(choose_source(r, c, {}), 1u);
    // A source at the cap loses to one under it even if that one is filling.
    c = {{1, 11, &x, true, 2, 1}, {2, 12, &y, false, 1, 2}};
    EXPECT_EQ(choose_source(r, c, PolicyConfig{2}), 1u);
    // All at the cap: still served (least loaded), never refused.
    c = {{1, 11, &x, true, 5, 1}, {2, 12, &y, true, 4, 2}};
    EXPECT_EQ(choose_source(r, c, PolicyConfig{2}), 1u);
    // Distance dominates the cap: a busy same-dc replica beats an idle other-dc one.
    Labels far = L("b", "r1", "h1");
    c = {{1, 11, &far, true, 0, 1}, {2, 12, &y, false, 9, 2}};
    EXPECT_EQ(choose_source(r, c, PolicyConfig{2}), 1u);
}

TEST(Policy, CompleteBeforeFillingAtEqualLoad) {
    Labels me = L("a", "r1", "h0"), x = L("a", "r1", "h1"), y = L("a", "r1", "h2");
    std::vector<Candidate> c = {{1, 11, &x, false, 0, 1}, {2, 12, &y, true, 0, 2}};
    EXPECT_EQ(choose_source(Request{&me, 99, 0, {}, {}}, c, {}), 1u);
}

TEST(Policy, SpreadsLoadOffBusySources) {
    Labels me = L("a", "r1", "h0"), x = L("a", "r1", "h1"), y = L("a", "r1", "h2");
    std::vector<Candidate> c = {{1, 11, &x, true, 0, 1, 1000}, {2, 12, &y, true, 0, 2, 10}};
    EXPECT_EQ(choose_source(Request{&me, 99, 0, {}, {}}, c, {}), 1u);
    // An idle publisher that already served the shard loses to an idle
    // filling reader: the next reader joins the chain.
    c = {{1, 11, &x, true, 0, 1, 1000, true}, {2, 12, &y, false, 0, 2, 0}};
    EXPECT_EQ(choose_source(Request{&me, 99, 0, {}, {}}, c, {}), 1u);
    // An idle holder that is not the publisher beats an idle filling reader
    // even though it served more: it serves at full speed (elastic join).
    c = {{1, 11, &x, true, 0, 1, 1000}, {2, 12, &y, false, 0, 2, 0}};
    EXPECT_EQ(choose_source(Request{&me, 99, 0, {}, {}}, c, {}), 0u);
}

TEST(Policy, ExcludesSelfFailedAndYoungerFillingReplicas) {
    Labels me = L("a", "r1", "h0"), x = L("a", "r1", "h1");
    std::vector<Candidate> c = {{99, 11, &x, true, 0, 1}};
    EXPECT_FALSE(choose_source(Request{&me, 99, 0, {}, {}}, c, {}));  // itself
    c = {{5, 11, &x, true, 0, 1}};
    EXPECT_FALSE(choose_source(Request{&me, 99, 0, {5}, {}}, c, {}));  // failed before
    // A filling replica registered after the reader's own would let two readers
    // wait for each other.
    c = {{5, 11, &x, false, 0, 10}};
    EXPECT_FALSE(choose_source(Request{&me, 99, 7, {}, {}}, c, {}));
    EXPECT_EQ(choose_source(Request{&me, 99, 12, {}, {}}, c, {}), 0u);
    EXPECT_EQ(choose_source(Request{&me, 99, 0, {}, {}}, c, {}), 0u);  // a non-serving reader may follow anyone
}

TEST(Policy, OneReaderPerDatacenterCrossesTheWan) {
    // dc b readers arrive one by one: the first crosses to dc a, the others
    // follow replicas inside dc b even while those are filling.
    Labels pub = L("a", "r1", "p"), r1 = L("b", "r1", "h1"), r2 = L("b", "r1", "h2"), r3 = L("b", "r2", "h3");
    std::vector<Candidate> c = {{1, 11, &pub, true, 0, 1}};
    EXPECT_EQ(choose_source(Request{&r1, 2, 2, {}, {}}, c, {}), 0u);
    c.push_back({2, 12, &r1, false, 0, 2});
    c[0].active_reads = 1;
    EXPECT_EQ(choose_source(Request{&r2, 3, 3, {}, {}}, c, {}), 1u);
    c.push_back({3, 13, &r2, false, 0, 3});
    c[1].active_reads = 1;
    auto pick = choose_source(Request{&r3, 4, 4, {}, {}}, c, {});
    ASSERT_TRUE(pick);
    EXPECT_NE(*pick, 0u);
}

// The server indexes holders by these keys and trusts them to mean distance.
TEST(Policy, NeighbourhoodKeysMeanDistance) {
    std::vector<Labels> all;
    for (const char *dc : {"", "a", "ab", "-"})
        for (const char *rack : {"", "r", "br"})
            for (const char *zone : {"", "z"})
                for (const char *host : {"", "h", "bh", "c", "-"}) {
                    Labels l;
                    for (auto [key, value] : {std::pair{"dc", dc}, {"rack", rack}, {"zone", zone}, {"host", host}})
                        if (*value) l[key] = value[0] == '-' ? "" : value;
                    all.push_back(l);
                }
    auto shared = [](const std::string &x, const std::string &y) { return !x.empty() && x == y; };
    for (const Labels &a : all)
        for (const Labels &b : all) {
            Neighbourhood x = neighbourhood(a), y = neighbourhood(b);
            Distance d = distance(a, b);
            EXPECT_EQ(x.dc == y.dc, d != Distance::OtherDc) << format_labels(a) << " / " << format_labels(b);
            EXPECT_EQ(shared(x.host, y.host), d == Distance::SameHost) << format_labels(a) << " / " << format_labels(b);
            bool rack_or_zone = shared(x.rack, y.rack) || shared(x.zone, y.zone);
            if (d == Distance::SameRack) {
                EXPECT_TRUE(rack_or_zone) << format_labels(a) << " / " << format_labels(b);
            }
            if (rack_or_zone) {
                EXPECT_LE(d, Distance::SameRack) << format_labels(a) << " / " << format_labels(b);
            }
        }
}
