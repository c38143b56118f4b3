// A replica and the spill that answers for it (Replica::succeed): when the
// copy stops answering, and which generations it marks unsettled. What the
// holder then answers is tested at the transport's level
// (GuardedReads.OfAGenerationThatEndedAreAnsweredByItsCopy) and end to end
// (GuardedRos.*). And the page of control words that replicas' readers read
// by address. No server: nothing here calls one.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "client/control_word.hpp"
#include "client/holdings.hpp"
#include "common/error.hpp"

using namespace th;

namespace {

struct Holder {
    static ClientConfig config() {
        ClientConfig c;
        c.server_url = "tcp://127.0.0.1:1";  // never dialled
        return c;
    }
    ClientConfig cfg = config();
    UcxWorker ucx{{}, {"tcp"}};
    ServerSession session{cfg, 7};
    ControlPage page{ucx};
    Holdings holdings{cfg, 7, session, ucx, page};

    // A replica of one tensor held in `bytes`.
    std::unique_ptr<Replica> replica(std::vector<uint8_t> &bytes) {
        th::TensorSpec spec{"w", TH_DTYPE_UINT8, {static_cast<int64_t>(bytes.size())}, bytes.size()};
        return holdings.prepare("m", 0, {Buffer{spec, bytes.data(), TH_MEM_HOST}});
    }
};

uint64_t generation_of(const Replica &r) { return r.desc().ctrl_generation; }

// A replica and a copy of it that answers for it.
class SpilledCopy : public ::testing::Test {
  protected:
    Holder h;
    std::vector<uint8_t> a = std::vector<uint8_t>(1 << 16, 1), b = a;
    std::unique_ptr<Replica> r = h.replica(a), copy = h.replica(b);
    void SetUp() override { copy->succeed(*r); }
};

}  // namespace

TEST_F(SpilledCopy, LastsUntilTheCopysOwnGenerationEnds) {
    EXPECT_EQ(h.ucx.successions(), 1u);
    r->end_generation();  // what the copy answers for from now on
    EXPECT_EQ(h.ucx.successions(), 1u);
    copy->end_generation();
    EXPECT_EQ(h.ucx.successions(), 0u);
    // Nothing was being sent: neither generation is marked.
    EXPECT_LT(r->control_word()->unsettled.load(), generation_of(*r));
    EXPECT_LT(copy->control_word()->unsettled.load(), generation_of(*copy));
}

// Its readers read the replica's word, not the copy's: a copy whose bytes
// turn out changed marks the generation it answered for as well.
TEST_F(SpilledCopy, ACopyFoundChangedMarksTheGenerationItAnsweredFor) {
    r->end_generation();
    copy->distrust_generation();
    EXPECT_EQ(h.ucx.successions(), 0u);
    EXPECT_GE(copy->control_word()->unsettled.load(), generation_of(*copy));
    EXPECT_GE(r->control_word()->unsettled.load(), generation_of(*r));
}

TEST_F(SpilledCopy, EndsWithACopyFreedWithoutEndingItsGeneration) {
    copy.reset();
    EXPECT_EQ(h.ucx.successions(), 0u);
}

TEST(ReplicaSucceed, NeedsACopyOfTheSameBuffers) {
    Holder h;
    std::vector<uint8_t> a(1 << 16, 1), b(1 << 15, 1);
    auto r = h.replica(a), copy = h.replica(b);
    try {
        copy->succeed(*r);
        FAIL() << "a copy of other buffers answered for the replica";
    } catch (const Error &e) {
        EXPECT_EQ(e.code(), TH_ERR_INTERNAL);
    }
    EXPECT_EQ(h.ucx.successions(), 0u);
}

// A held replica whose handle is destroyed without release stops being held:
// its control word tells readers still on it that it is gone, and the
// client's shutdown, which releases what is held, does not reach it.
TEST(Replica, DestroyedWithoutReleaseIsNoLongerHeld) {
    Holder h;
    std::vector<uint8_t> a(1 << 16, 1);
    std::unique_ptr<Replica> r = h.replica(a);
    h.holdings.remember(r.get());
    ControlWord *word = r->control_word();
    uint64_t g = generation_of(*r);
    r.reset();
    EXPECT_GT(word->generation.load(), g);
    h.holdings.withdraw_all();  // nothing held: no release of freed memory
}

// A reader on a one-sided lane reads a holder's word by address, even once
// the holder's client is gone: the page stays a page of words whose
// generations only grow, taken over by the next client of the process.
TEST(ControlPage, OutlivesItsClientAsWordsThatSayTheirReplicasChanged) {
    UcxWorker ucx{{}, {"tcp"}};
    ControlWord *word = nullptr;
    uint64_t live = 0, released = 0;
    {
        ControlPage page{ucx, 8};
        ControlPage::Slot held = page.acquire(), let_go = page.acquire();
        word = held.word;
        live = held.word->generation.load();
        released = let_go.word->generation.load();
        page.release(let_go.word);
    }  // the client went with `held` still published
    EXPECT_NE(word->generation.load(), live) << "a reader of the replica would keep what it read";
    EXPECT_EQ(word->generation.load() % 2, 1u);

    ControlPage next{ucx, 8};
    std::vector<ControlWord *> words;
    for (int i = 0; i < 8; ++i) words.push_back(next.acquire().word);
    EXPECT_NE(std::find(words.begin(), words.end(), word), words.end()) << "the page was not taken over";
    for (ControlWord *w : words) EXPECT_EQ(w->generation.load() % 2, 0u);
    EXPECT_GT(word->generation.load(), live);
    EXPECT_GT((word + 1)->generation.load(), released);
}
