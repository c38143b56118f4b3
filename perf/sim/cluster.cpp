#include "cluster.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <queue>
#include <random>
#include <set>
#include <stdexcept>

#include "client/fetch.hpp"
#include "common/labels.hpp"
#include "control.hpp"
#include "network.hpp"

namespace th::sim {

const char *method_name(Method m) {
    switch (m) {
        case Method::TensorHub: return "tensorhub";
        case Method::TrainerDirect: return "trainer_direct";
        case Method::Collective: return "collective";
        case Method::Store: return "store";
    }
    return "?";
}

const char *workload_name(Workload w) {
    switch (w) {
        case Workload::Standalone: return "standalone";
        case Workload::Elastic: return "elastic_join";
        case Workload::CrossDc: return "cross_dc";
    }
    return "?";
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr uint64_t kVersion = 1;

// One range of chunks a worker reads from one source, as a client's
// FetchSource does: a tensorhub reader planned per stripe has one per run of
// stripes; every other reader one for the whole shard. A lane whose source
// is lost is cut where it got to (end = what it read) and its rest planned
// anew.
struct Lane {
    uint32_t first = 0, end = 0;  // chunks [first, end)
    int src = -1;
    uint64_t src_replica = 0;
    int flow = -1;
    double bytes = 0;       // absolute position in the shard (settled while it has no flow)
    double seg_start = 0;   // bytes when the current flow started
    uint32_t limit = 0;     // chunk the current flow may read up to
    bool done = false;
    uint32_t gen = 0;       // bumped when the lane stops: stale wake-ups are ignored
};

struct Worker {
    uint64_t id = 0;  // the server's worker id
    int dc = 0;
    Labels labels;
    bool reader = false;     // part of the update being measured
    bool registered = false;
    double ready = 0, done = -1;
    bool holds = false;  // a complete copy
    bool gone = false;
    int depth = -1;          // hops from the trainer (computed at the end)
    std::vector<Lane> lanes;  // the fetch in progress
    bool replan_pending = false;
    uint64_t replica = 0;  // its own replica id (tensorhub: serves while filling)
    std::vector<std::pair<int, int>> waiters;  // (worker, lane) waiting for its next chunks
    std::map<std::pair<uint64_t, uint64_t>, uint64_t> bytes_from;
    std::vector<uint64_t> exclude, exclude_replicas;
};

class Sim {
  public:
    Sim(const Setup &s, Method m);
    Result run();

  private:
    struct Timer {
        double at;
        uint64_t seq;
        std::function<void()> fn;
        bool operator>(const Timer &o) const { return at != o.at ? at > o.at : seq > o.seq; }
    };
    void after(double delay, std::function<void()> fn) { timers_.push({now_ + delay, seq_++, std::move(fn)}); }

    int add_worker(int dc, bool reader);
    std::vector<int> path(int src, int dst) const;
    // Byte counts are doubles: within a byte of a chunk's end counts as
    // holding it (the network's own tolerance), so marks and targets agree.
    uint32_t chunks_of(double bytes) const {
        return bytes >= total_ - 1.0 ? nchunks_ : static_cast<uint32_t>((bytes + 1.0) / chunk_);
    }
    double bytes_of(uint32_t chunks) const { return std::min(total_, double(chunks) * chunk_); }
    double position(const Lane &l) const { return l.flow >= 0 ? net_.bytes_at(l.flow, now_) : l.bytes; }
    // The end of the run of chunks from `from` (at most `end`) worker w holds,
    // as its control word says: each lane holds what it read from its start.
    uint32_t held(int w, uint32_t from, uint32_t end) const;
    // The same, as far as its lanes have read (whatever others may see).
    uint32_t read_until(int w, uint32_t from, uint32_t end) const;

    void setup();
    void start_fetch(int w);
    void plan_and_read(int w);
    // Plans the chunks no lane of w is assigned (tensorhub).
    void plan_uncovered(int w, bool replan);
    void add_lanes(int w, const Plan &p);
    void read(int w, int lane);
    void end_segment(int w, int lane);
    // The lane's source is gone or changed: the lane stops where it got to.
    void cut(int w, int lane);
    void set_mark(int s);
    void notify(int s);
    void lane_done(int w, int lane);
    void finish(int w);
    void on_target(int flow);
    void on_mark(int flow) { notify(owner_.at(flow).first); }
    void lose(int x);
    void preempt();
    void source_lost(int w, int lost);
    void mutate_trainer(double since);
    void heartbeat();
    int depth_of(int w, uint32_t c, std::vector<std::vector<int>> &memo);
    void violation(std::string what) {
        if (res_.violations.size() < 20) res_.violations.push_back(std::move(what));
    }

    Setup s_;
    Method m_;
    double total_, chunk_;
    uint32_t nchunks_;
    double now_ = 0;
    uint64_t seq_ = 0;
    std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers_;
    Network net_;
    std::vector<Worker> w_;
    std::vector<int> up_, down_, rack_up_, rack_down_;
    std::map<std::pair<int, int>, int> wan_;
    std::unordered_map<int, std::pair<int, int>> owner_;  // flow -> (worker, lane)
    std::vector<double> served_;                          // bytes each worker served
    std::unique_ptr<Control> ctl_;
    Result res_;
    int trainer_ = 0, store_ = -1;
    std::vector<int> readers_;
    double t_mutate_ = 0, trainer_free_ = -1;
    uint64_t next_replica_ = 1000;
    size_t readers_left_ = 0;
};

Sim::Sim(const Setup &s, Method m) : s_(s), m_(m) {
    total_ = double(s.size_bytes);
    chunk_ = double(m == Method::Collective ? s.collective_segment : s.chunk_bytes);
    nchunks_ = static_cast<uint32_t>(std::ceil(total_ / chunk_));
    // A tensorhub reader that serves confirms each chunk as it arrives (one
    // control-word read, on an endpoint of its own, fetch_source.cpp), so chunks
    // become visible to followers one by one, as a store value or a
    // broadcast segment does; the read itself is the delay of notify().
    if (m == Method::TensorHub)
        ctl_ = std::make_unique<Control>([this] { return static_cast<uint64_t>(now_ * 1000); }, s.max_readers_per_source,
                                         s.stripes);
}

int Sim::add_worker(int dc, bool reader) {
    int i = static_cast<int>(w_.size());
    Worker w;
    w.id = static_cast<uint64_t>(i) + 1;
    w.dc = dc;
    w.reader = reader;
    // One GPU per host, each with its own NIC.
    w.labels = {{"dc", str("dc", dc)}, {"rack", str("dc", dc, "-r", i / s_.hosts_per_rack)}, {"host", str("h", i)}};
    w_.push_back(std::move(w));
    up_.push_back(net_.add_link(s_.host_bps));
    down_.push_back(net_.add_link(s_.host_bps));
    int rack = i / static_cast<int>(s_.hosts_per_rack);
    if (s_.rack_oversub > 1 && rack >= static_cast<int>(rack_up_.size())) {
        double cap = s_.hosts_per_rack * s_.host_bps / s_.rack_oversub;
        rack_up_.push_back(net_.add_link(cap));
        rack_down_.push_back(net_.add_link(cap));
    }
    served_.push_back(0);
    return i;
}

std::vector<int> Sim::path(int src, int dst) const {
    std::vector<int> p{up_[src]};
    int rs = src / static_cast<int>(s_.hosts_per_rack), rd = dst / static_cast<int>(s_.hosts_per_rack);
    if (!rack_up_.empty() && (rs != rd || w_[src].dc != w_[dst].dc)) {
        p.push_back(rack_up_[rs]);
        p.push_back(rack_down_[rd]);
    }
    if (w_[src].dc != w_[dst].dc) p.push_back(wan_.at({w_[src].dc, w_[dst].dc}));
    p.push_back(down_[dst]);
    return p;
}

uint32_t Sim::held(int w, uint32_t from, uint32_t end) const {
    const Worker &x = w_[w];
    if (x.gone) return from;
    if (x.holds) return end;
    // Push then pull: readers of a store start once the whole push is in.
    if (w == store_ && !s_.store_pipelined) return from;
    return read_until(w, from, end);
}

uint32_t Sim::read_until(int w, uint32_t from, uint32_t end) const {
    const Worker &x = w_[w];
    uint32_t c = from;
    while (c < end) {
        uint32_t best = c;
        for (const Lane &l : x.lanes)
            if (l.first <= c && c < std::max(l.end, l.first + 1))
                best = std::max(best, std::min(l.end, chunks_of(position(l))));
        if (best <= c) break;
        c = std::min(end, best);
    }
    return c;
}

void Sim::set_mark(int s) {
    Worker &x = w_[s];
    if (x.waiters.empty()) return;
    for (Lane &l : x.lanes) {
        if (l.flow < 0) continue;
        uint32_t got = chunks_of(net_.bytes_at(l.flow, now_));
        net_.set_mark(l.flow, bytes_of(std::min(l.end, got + 1)));
    }
}

void Sim::notify(int s) {
    std::vector<std::pair<int, int>> keep;
    for (auto [w, li] : w_[s].waiters) {
        Worker &x = w_[w];
        Lane &l = x.lanes[li];
        if (l.src != s || l.flow >= 0 || l.done || x.done >= 0) continue;  // moved on meanwhile
        uint32_t pos = chunks_of(l.bytes);
        if (held(s, pos, l.end) > pos) {
            uint32_t gen = l.gen;
            // A tensorhub reader sees them at its next poll of the control
            // word; a broadcast or store reader one round trip later.
            double delay = m_ == Method::TensorHub ? s_.poll_s / 2 + s_.rtt_s : s_.rtt_s;
            after(delay, [this, w, li, gen] {
                Lane &y = w_[w].lanes[li];
                if (y.gen == gen && y.flow < 0 && !y.done && w_[w].done < 0) read(w, li);
            });
        } else {
            keep.push_back({w, li});
        }
    }
    w_[s].waiters = std::move(keep);
    set_mark(s);
}

void Sim::read(int w, int li) {
    Lane &l = w_[w].lanes[li];
    int src = l.src;
    if (w_[src].gone) {  // planned onto a worker the server does not know is lost yet
        cut(w, li);
        source_lost(w, src);
        return;
    }
    uint32_t pos = chunks_of(l.bytes);
    uint32_t avail = held(src, pos, l.end);
    if (avail > pos) {
        l.limit = avail;
        l.seg_start = l.bytes;
        l.flow = net_.start(path(src, w), l.bytes, bytes_of(avail), now_);
        owner_[l.flow] = {w, li};
        set_mark(w);
    } else {
        w_[src].waiters.push_back({w, li});
        set_mark(src);
    }
}

void Sim::end_segment(int w, int li) {
    Worker &x = w_[w];
    Lane &l = x.lanes[li];
    if (l.flow < 0) return;
    l.bytes = net_.bytes_at(l.flow, now_);
    net_.stop(l.flow, now_);
    owner_.erase(l.flow);
    l.flow = -1;
    double moved = l.bytes - l.seg_start;
    if (moved <= 0) return;
    served_[l.src] += moved;
    x.bytes_from[{w_[l.src].id, l.src_replica}] += static_cast<uint64_t>(std::llround(moved));
    if (w_[l.src].dc != x.dc) res_.wan_bytes += static_cast<uint64_t>(std::llround(moved));
}

void Sim::cut(int w, int li) {
    end_segment(w, li);
    Lane &l = w_[w].lanes[li];
    if (l.done) return;
    l.end = std::max(l.first, chunks_of(l.bytes));
    l.bytes = bytes_of(l.end);  // a chunk read in part is read again
    l.done = true;
    l.gen++;
    notify(w);
}

void Sim::on_target(int flow) {
    auto [w, li] = owner_.at(flow);
    Lane &l = w_[w].lanes[li];
    double mine = net_.bytes_at(flow, now_);
    if (!w_[l.src].holds && chunks_of(mine) > held(l.src, l.first, l.end))
        violation("worker " + std::to_string(w) + " is ahead of its source " + std::to_string(l.src));
    if (mine >= bytes_of(l.end) - 1.0) {
        end_segment(w, li);
        lane_done(w, li);
        return;
    }
    uint32_t avail = held(l.src, l.limit, l.end);
    if (avail > l.limit) {
        l.limit = avail;
        net_.set_target(flow, bytes_of(avail));
        return;
    }
    // Caught up with a filling source: wait for its next chunks. Idle, it
    // confirms what it holds, which its own followers may be waiting for.
    end_segment(w, li);
    notify(w);
    w_[l.src].waiters.push_back({w, li});
    set_mark(l.src);
}

void Sim::lane_done(int w, int li) {
    Worker &x = w_[w];
    Lane &l = x.lanes[li];
    l.done = true;
    l.gen++;
    if (l.src == trainer_) trainer_free_ = std::max(trainer_free_, now_);
    notify(w);
    if (read_until(w, 0, nchunks_) >= nchunks_) {
        finish(w);
        return;
    }
    // Nothing left to read but chunks no lane has: plan them now rather than
    // wait for the stripe timer.
    bool busy = std::any_of(x.lanes.begin(), x.lanes.end(), [](const Lane &y) { return !y.done; });
    if (!busy && !x.replan_pending && m_ == Method::TensorHub) plan_uncovered(w, false);
}

void Sim::finish(int w) {
    Worker &x = w_[w];
    for (size_t i = 0; i < x.lanes.size(); ++i) end_segment(w, static_cast<int>(i));
    x.holds = true;
    x.done = now_;
    if (ctl_)
        ctl_->fetch_done(x.id, kVersion, x.replica, x.bytes_from,
                         static_cast<uint64_t>(std::llround((now_ - x.ready) * 1e6)));
    notify(w);
    if (x.reader) readers_left_--;
}

void Sim::start_fetch(int w) {
    Worker &x = w_[w];
    if (ctl_ && !x.registered) {
        ctl_->hello(x.id, x.labels);
        x.registered = true;
    }
    if (ctl_) x.replica = next_replica_++;
    plan_and_read(w);
}

void Sim::add_lanes(int w, const Plan &p) {
    Worker &x = w_[w];
    for (const PlannedSource &r : p.ranges) {
        Lane l;
        l.first = r.first_chunk;
        l.end = r.first_chunk + r.num_chunks;
        l.src = static_cast<int>(r.worker - 1);
        l.src_replica = r.replica;
        l.bytes = bytes_of(l.first);
        // A lost worker's replicas stay listed until readers report it or it
        // falls silent (server/reachability.hpp); read() handles those.
        if (r.complete && !w_[l.src].holds && !w_[l.src].gone) violation("server calls a filling replica complete");
        x.lanes.push_back(l);
        read(w, static_cast<int>(x.lanes.size() - 1));
    }
}

void Sim::plan_and_read(int w) {
    Worker &x = w_[w];
    x.lanes.clear();
    switch (m_) {
        case Method::TensorHub: {
            Plan p;
            std::string why;
            if (!ctl_->plan(x.id, kVersion, x.replica, 0, nchunks_, x.exclude, x.exclude_replicas, wire::PlanMode::Striped,
                            &p, &why)) {
                // The client would give up at its deadline; a simulated
                // reader asks again a little later and it is counted.
                res_.replans++;
                after(0.01, [this, w] { plan_and_read(w); });
                return;
            }
            add_lanes(w, p);
            // Stripes left out wait for their relays, briefly (fetch.hpp).
            uint32_t covered = 0;
            for (const PlannedSource &r : p.ranges) covered += r.num_chunks;
            if (covered < nchunks_ && !x.replan_pending) {
                x.replan_pending = true;
                after(s_.stripe_wait_s, [this, w] {
                    w_[w].replan_pending = false;
                    if (w_[w].done < 0 && !w_[w].gone) plan_uncovered(w, false);
                });
            }
            return;
        }
        case Method::TrainerDirect: x.lanes.push_back({0, nchunks_, trainer_}); break;
        case Method::Store: x.lanes.push_back({0, nchunks_, w == store_ ? trainer_ : store_}); break;
        case Method::Collective: return;  // lanes set by the chain when the broadcast starts
    }
    read(w, 0);
}

void Sim::plan_uncovered(int w, bool replan) {
    Worker &x = w_[w];
    if (x.done >= 0 || x.gone) return;
    std::vector<uint8_t> covered(nchunks_, 0);
    for (const Lane &l : x.lanes)
        for (uint32_t c = l.first; c < l.end; ++c) covered[c] = 1;
    bool asked = false;
    for (uint32_t c = 0; c < nchunks_;) {
        if (covered[c]) {
            ++c;
            continue;
        }
        uint32_t e = c;
        while (e < nchunks_ && !covered[e]) ++e;
        Plan p;
        std::string why;
        if (!ctl_->plan(x.id, kVersion, x.replica, c, e - c, x.exclude, x.exclude_replicas, wire::PlanMode::StripedNow, &p,
                        &why)) {
            res_.replans++;
            after(0.01, [this, w] { plan_uncovered(w, true); });
            return;
        }
        asked = true;
        add_lanes(w, p);
        c = e;
    }
    if (asked && replan) res_.replans++;
}

// A worker is lost (spot preemption): its flows stop at once; readers on it
// notice after detect_s, report it and re-plan the chunks they still miss.
void Sim::lose(int lost) {
    Worker &l = w_[lost];
    for (size_t i = 0; i < l.lanes.size(); ++i) end_segment(lost, static_cast<int>(i));
    l.gone = true;
    l.holds = false;
    if (l.reader && l.done < 0) readers_left_--;
    l.done = l.done < 0 ? now_ : l.done;
    l.waiters.clear();
    for (int w = 0; w < static_cast<int>(w_.size()); ++w) {
        Worker &x = w_[w];
        if (x.done >= 0 || x.gone) continue;
        bool hit = false;
        for (size_t i = 0; i < x.lanes.size(); ++i)
            if (x.lanes[i].src == lost && !x.lanes[i].done) {
                cut(w, static_cast<int>(i));
                hit = true;
            }
        if (hit) source_lost(w, lost);
    }
}

void Sim::source_lost(int w, int lost) {
    after(s_.detect_s, [this, w, lost] {
        Worker &y = w_[w];
        if (y.done >= 0 || y.gone) return;
        if (std::find(y.exclude.begin(), y.exclude.end(), w_[lost].id) != y.exclude.end()) return;  // handled
        ctl_->source_failed(y.id, w_[lost].id);
        y.exclude.push_back(w_[lost].id);
        plan_uncovered(w, true);
    });
}

// The trainer wants its buffers back for the optimizer step: BeginMutation
// until the server says no reader is on it any more (or the wait ran out),
// spilling an owned copy first if it holds the last complete one.
void Sim::mutate_trainer(double since) {
    Worker &t = w_[trainer_];
    MutationState st = ctl_->begin_mutation(t.id, t.replica);
    double waited = now_ - since;
    double wait_s = 5.0;  // client default mutation_wait_ms
    if (st.last_copy && st.filling > 0 && waited < wait_s) {
        after(0.01, [this, since] { mutate_trainer(since); });
        return;
    }
    if (st.last_copy) {
        double spill = total_ / s_.copy_bps;
        res_.trainer_stall_s += spill;
        uint64_t owned = next_replica_++;
        after(spill, [this, owned] { ctl_->publish(w_[trainer_].id, kVersion, owned, s_.size_bytes, s_.chunk_bytes, true); });
    }
    if (st.active_reads > 0 && waited < wait_s) {
        after(0.005, [this, since] { mutate_trainer(since); });
        return;
    }
    res_.trainer_stall_s += waited;
    // Past the wait the seqlock catches readers still on it: they re-read
    // elsewhere.
    for (int w = 0; w < static_cast<int>(w_.size()); ++w) {
        Worker &x = w_[w];
        if (x.done >= 0 || x.gone) continue;
        bool hit = false;
        for (size_t i = 0; i < x.lanes.size(); ++i) {
            Lane &l = x.lanes[i];
            if (l.src != trainer_ || l.done || l.src_replica != t.replica) continue;
            cut(w, static_cast<int>(i));
            hit = true;
        }
        if (!hit) continue;
        x.exclude_replicas.push_back(t.replica);
        after(s_.rtt_s, [this, w] { plan_uncovered(w, true); });
    }
}

void Sim::heartbeat() {
    if (readers_left_ == 0) return;
    for (Worker &x : w_)
        if (x.registered && !x.gone) ctl_->heartbeat(x.id);
    ctl_->expire(static_cast<uint64_t>(now_ * 1000));
    after(s_.heartbeat_ms / 1000.0, [this] { heartbeat(); });
}

// Hops from the trainer to worker w for chunk c: one more than the worker
// its lane for c read from. memo: per worker, per chunk; -2 not seen, -1
// being computed (a cycle if met again).
int Sim::depth_of(int w, uint32_t c, std::vector<std::vector<int>> &memo) {
    if (w == trainer_) return 0;
    if (w_[w].depth >= 0) return w_[w].depth;  // a holder from before the update
    std::vector<int> &m = memo[w];
    if (m.empty()) m.assign(nchunks_, -2);
    if (m[c] >= 0) return m[c];
    if (m[c] == -1) {
        violation("worker " + std::to_string(w) + " read chunk " + std::to_string(c) + " from a worker that read it from it");
        return 0;
    }
    m[c] = -1;
    int src = -1;
    for (const Lane &l : w_[w].lanes)
        if (l.first <= c && c < l.end) src = l.src;
    int d = src < 0 ? 0 : depth_of(src, c, memo) + 1;
    return m[c] = d;
}

void Sim::setup() {
    int reader_dc = s_.workload == Workload::CrossDc ? 1 : 0;
    if (s_.workload == Workload::CrossDc) {
        wan_[{0, 1}] = net_.add_link(s_.wan_bps);
        wan_[{1, 0}] = net_.add_link(s_.wan_bps);
    }
    trainer_ = add_worker(0, false);
    w_[trainer_].holds = true;
    // The store sits with the readers: its push crosses a WAN once.
    if (m_ == Method::Store) store_ = add_worker(reader_dc, false);
    std::vector<int> holders;
    for (uint32_t i = 0; i < s_.holders; ++i) holders.push_back(add_worker(0, false));
    for (uint32_t i = 0; i < s_.readers; ++i) readers_.push_back(add_worker(reader_dc, true));
    std::vector<double> ready = reader_ready_times(s_);
    for (size_t i = 0; i < readers_.size(); ++i) w_[readers_[i]].ready = ready[i];
    readers_left_ = readers_.size();
    for (int h : holders) {
        w_[h].holds = true;
        w_[h].depth = 1;
    }
    if (ctl_) {
        Worker &t = w_[trainer_];
        ctl_->hello(t.id, t.labels);
        t.registered = true;
        // Holders already fetched the version before the update starts.
        for (int h : holders) {
            Worker &x = w_[h];
            ctl_->hello(x.id, x.labels);
            x.registered = true;
        }
        if (s_.workload != Workload::Elastic)
            for (int r : readers_) {
                ctl_->hello(w_[r].id, w_[r].labels);
                w_[r].registered = true;
            }
        t.replica = next_replica_++;
        if (s_.workload != Workload::Elastic) ctl_->reset_stats();  // registration is not part of the update
        ctl_->publish(t.id, kVersion, t.replica, s_.size_bytes, s_.chunk_bytes);
        for (int h : holders) {
            Worker &x = w_[h];
            x.replica = next_replica_++;
            Plan p;
            std::string why;
            if (!ctl_->plan(x.id, kVersion, x.replica, 0, nchunks_, {}, {}, wire::PlanMode::Single, &p, &why))
                violation("holder without a plan: " + why);
            ctl_->fetch_done(x.id, kVersion, x.replica, {{{p.ranges[0].worker, p.ranges[0].replica}, s_.size_bytes}}, 0);
        }
        // Elastic: the version was there before the joiners came.
        if (s_.workload == Workload::Elastic) ctl_->reset_stats();
    }
    double floor_s = total_ / s_.host_bps;
    t_mutate_ = s_.train_step_s >= 0 ? s_.train_step_s : 2 * floor_s;

    if (m_ == Method::Collective) {
        // Everyone enters the broadcast; it starts when the last one is ready
        // and runs as a pipeline along a chain rooted at the trainer.
        double start = 0;
        for (int r : readers_) start = std::max(start, w_[r].ready);
        after(start, [this] {
            int prev = trainer_;
            for (int r : readers_) {
                w_[r].lanes = {Lane{0, nchunks_, prev}};
                prev = r;
            }
            for (int r : readers_) read(r, 0);
        });
        return;
    }
    if (m_ == Method::Store) after(0, [this] { start_fetch(store_); });
    for (int r : readers_) after(w_[r].ready, [this, r] { start_fetch(r); });
    if (m_ == Method::TensorHub) {
        after(t_mutate_, [this] { mutate_trainer(now_); });
        if (s_.heartbeat_ms > 0) after(s_.heartbeat_ms / 1000.0, [this] { heartbeat(); });
        if (s_.preempt > 0) {
            double at = s_.preempt_at_s >= 0 ? s_.preempt_at_s : floor_s / 2;
            after(at, [this] { preempt(); });
        }
    }
}

// Spot loss: the workers serving the most readers right now (any holder or
// reader if none serves) disappear.
void Sim::preempt() {
    std::vector<std::pair<int, int>> load;  // (-readers on it, worker)
    std::vector<int> on(w_.size(), 0);
    for (const Worker &x : w_)
        if (x.done < 0 && !x.gone)
            for (const Lane &l : x.lanes)
                if (!l.done && l.src >= 0) on[l.src]++;
    for (int i = 0; i < static_cast<int>(w_.size()); ++i)
        if (i != trainer_ && i != store_ && !w_[i].gone) load.push_back({-on[i], i});
    std::sort(load.begin(), load.end());
    for (uint32_t k = 0; k < s_.preempt && k < load.size(); ++k) lose(load[k].second);
}

Result Sim::run() {
    auto wall = std::chrono::steady_clock::now();
    res_.method = m_;
    setup();
    Network::Callbacks cb{[this](int f) { on_target(f); }, [this](int f) { on_mark(f); }};
    uint64_t same_time = 0;
    for (;;) {
        if (same_time > 10'000'000) {
            violation("no progress: ten million events at t=" + std::to_string(now_));
            break;
        }
        double before = now_;
        double t_timer = timers_.empty() ? kInf : timers_.top().at;
        double t_due = net_.next_due();
        if (t_timer == kInf && t_due == kInf) break;
        if (t_timer <= t_due) {
            // Everything due at this instant, then one rate update.
            now_ = t_timer;
            while (!timers_.empty() && timers_.top().at == now_) {
                Timer t = timers_.top();
                timers_.pop();
                t.fn();
            }
        } else {
            now_ = t_due;
            net_.fire_due(cb);
        }
        net_.resolve(now_);
        res_.events++;
        same_time = now_ == before ? same_time + 1 : 0;
    }
    // Results.
    double floor_s = total_ / s_.host_bps, last_ready = 0, first_ready = kInf, last_done = 0, depth_sum = 0;
    uint32_t counted = 0;
    std::vector<std::vector<int>> depth_memo(w_.size());
    for (int r : readers_) {
        const Worker &x = w_[r];
        if (x.gone) continue;
        last_ready = std::max(last_ready, x.ready);
        first_ready = std::min(first_ready, x.ready);
        if (x.done < 0 || !x.holds) {
            violation("reader " + std::to_string(r) + " ended holding " + std::to_string(held(r, 0, nchunks_)) + " of " +
                      std::to_string(nchunks_) + " chunks");
            continue;
        }
        last_done = std::max(last_done, x.done);
        res_.reader_stall_s += x.done - x.ready;
        int depth = 0;
        for (uint32_t c = 0; c < nchunks_; ++c) depth = std::max(depth, depth_of(r, c, depth_memo));
        res_.depth_max = std::max<uint32_t>(res_.depth_max, depth);
        depth_sum += depth;
        counted++;
    }
    res_.floor_s = last_ready + floor_s;
    if (s_.workload == Workload::CrossDc) res_.floor_s = std::max(res_.floor_s, total_ / s_.wan_bps);
    res_.makespan_s = last_done;
    res_.update_s = last_done - (first_ready == kInf ? 0 : first_ready);
    res_.depth_mean = counted ? depth_sum / counted : 0;
    if (res_.makespan_s < res_.floor_s * (1 - 1e-9))
        violation("makespan " + std::to_string(res_.makespan_s) + " s is below the floor " + std::to_string(res_.floor_s));
    // The trainer's buffers are busy until its last reader is done (the
    // store's push, the broadcast's first hop); tensorhub measured it above.
    if (m_ != Method::TensorHub) res_.trainer_stall_s = std::max(0.0, trainer_free_ - t_mutate_);
    res_.bytes_from_trainer = static_cast<uint64_t>(std::llround(served_[trainer_]));
    for (size_t i = 0; i < w_.size(); ++i)
        if (static_cast<int>(i) == store_) res_.bytes_from_store = static_cast<uint64_t>(std::llround(served_[i]));
        else if (static_cast<int>(i) != trainer_) res_.bytes_from_replicas += static_cast<uint64_t>(std::llround(served_[i]));
    if (ctl_) {
        const ControlStats &cs = ctl_->stats();
        res_.messages = cs.messages;
        res_.plans = cs.plans;
        res_.plan_seconds = cs.plan_seconds;
        res_.plan_max_seconds = cs.plan_max_seconds;
        res_.handle_seconds = cs.handle_seconds;
    }
    res_.recomputed_flows = net_.recomputed_flows();
    res_.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall).count();
    return res_;
}

}  // namespace

std::vector<double> reader_ready_times(const Setup &setup) {
    if (!setup.ready_offsets_s.empty()) {
        if (setup.ready_offsets_s.size() != setup.readers)
            throw std::invalid_argument(std::to_string(setup.ready_offsets_s.size()) + " ready offsets for " +
                                        std::to_string(setup.readers) + " readers");
        for (double t : setup.ready_offsets_s)
            if (!(t >= 0) || !std::isfinite(t))
                throw std::invalid_argument("a ready offset must be a finite number of seconds >= 0, not " +
                                            std::to_string(t));
        return setup.ready_offsets_s;
    }
    std::mt19937_64 rng(setup.seed);
    std::vector<double> ready(setup.readers, 0.0);
    if (setup.stagger_s > 0)
        for (double &t : ready) t = double(rng() >> 11) * 0x1.0p-53 * setup.stagger_s;
    return ready;
}

Result simulate(const Setup &setup, Method method) { return Sim(setup, method).run(); }

}  // namespace th::sim
