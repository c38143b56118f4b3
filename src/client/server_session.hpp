// This worker's session with the metadata server: the ordered list of servers
// and failing over along it, or the leader etcd names (epochs fence a stale
// server either way), Hello and registering
// again, the heartbeat thread, and the events the server publishes. Every
// request goes through call(), which registers again, fails over or retries
// as the reply calls for.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "client/client_config.hpp"
#include "client/follow_leader.hpp"
#include "common/deadline.hpp"
#include "control/rpc.hpp"
#include "control/subscriber.hpp"
#include "transport/worker.hpp"
#include "wire/wire.hpp"

namespace th {

// What the session needs from the replicas this worker holds.
class SessionListener {
  public:
    virtual ~SessionListener() = default;
    // Registering again: runs hello, then, if it said Hello (true), declares
    // every complete replica again (without recovery), with what is held kept
    // unchanged throughout.
    virtual void register_again(const std::function<bool()> &hello, const Deadline &deadline) = 0;
    // A heartbeat reply listed owned copies the server no longer requires.
    virtual void drop_owned(const std::vector<uint64_t> &ids) = 0;
    // A heartbeat reply listed chunks of this replica that a reader found
    // not matching their checksums: the listener checks its own copy.
    // It may answer for some of them only: the server asks again for the rest.
    virtual void check_reported(uint64_t replica_id, std::vector<uint32_t> chunks) = 0;
};

class ServerSession {
  public:
    using Build = std::function<wire::Bytes(wire::Builder &, const wire::Header &)>;

    // Reads the server list; connect() makes the first contact.
    ServerSession(const ClientConfig &cfg, uint64_t worker_id);
    ~ServerSession();

    // Says Hello to the server of the newest epoch (or the first that
    // answers) and starts heartbeats. ucx and listener outlive the session's
    // use of them (until disconnect()).
    void connect(UcxWorker &ucx, SessionListener &listener);
    const ClientConfig &config() const { return cfg_; }
    uint64_t worker_id() const { return worker_id_; }
    // Ends heartbeats (and with them re-registration and owned-copy drops).
    // From then on the worker is leaving: calls neither fail over nor
    // register again, so that shutting down waits at most for the attempt
    // in flight and never for a failover.
    void stop_heartbeats();
    // Tells the server this worker leaves, then drops the connections.
    void goodbye();
    void disconnect();

    // Sends a request built by build(builder, header) and returns the reply
    // envelope bytes. Error replies become Error exceptions. recover: on
    // "unknown worker", a stale or an unreachable server, register again or
    // fail over and retry; off inside re-registration.
    // attempts: with servers to fail over to, Split leaves a server that has
    // not answered within half the deadline (at most half a control call's
    // timeout) for the next; Whole gives it the whole deadline, for a caller
    // whose own short bound it is (running out of it says nothing about the
    // server; watch_calls() still moves on from a server that is gone).
    enum class Attempts { Split, Whole };
    wire::Bytes call(const Build &build, const Deadline &deadline, bool recover = true,
                     Attempts attempts = Attempts::Split);
    // A heartbeat now; the listener drops the owned copies its reply names.
    void beat();
    // The same, soon, on the heartbeat thread: the caller does not wait.
    void beat_soon();

    // Tells the server that reading from worker's replica failed (why), or,
    // with chunks, that those chunks did not match their checksums, or, with
    // stalled, that the replica (still filling) holds nothing new for a while.
    // A mismatch report lives in the server's memory until the holder's next
    // heartbeat: it is kept for a lease and sent again after this worker
    // registers with another server. Errors are logged, not thrown.
    void report_source(uint64_t worker, uint64_t replica, const std::string &why, const std::vector<uint32_t> &chunks,
                       bool stalled, const Deadline &deadline);

    // The UCX worker has a new address (after a pause): the heartbeat thread
    // registers it.
    void address_changed();
    // True for a while after this client registered again with a replaced
    // server: holders are still re-declaring what they hold there, so a
    // version that looks unknown may just not be back yet.
    bool rebuilding() const { return Clock::now() < rebuilt_by_.load(); }
    // Bumped each time this worker (re)registers.
    uint64_t registrations() const { return registrations_.load(); }
    // Workers the server suggested, at the first registration, to connect
    // to ahead of the first fetch (HelloReply.connect_ahead); taken once.
    std::vector<UcxWorker::PeerAddress> take_connect_ahead();
    // Waits until `until`, or until an event says model has a version newer
    // than newer_than, or events were missed, or `cancel` (may be null) is
    // set (looked at every 20 ms).
    void wait_for_commit(const std::string &model, uint64_t newer_than, const Deadline &until,
                         CancelFlag cancel = nullptr);

  private:
    wire::Header header();
    void hello(const Deadline &deadline);
    // Says Hello again and re-declares what we hold. False: list mode, the
    // server we failed over to refused to take over because the one we left
    // still answers, and we went back to that one (the caller's request may
    // be sent again there). With `since` (registrations() when the call that
    // found this worker unknown was sent): nothing, if this worker registered
    // with the server in use since. Calls on several threads find it unknown
    // together, and each Hello makes the server forget our replicas until
    // they are declared again: one is enough.
    static constexpr uint64_t kEveryTime = UINT64_MAX;
    bool reregister(const Deadline &deadline, uint64_t since = kEveryTime);
    // From the Hello of a re-registration to its last declaration the
    // server lists none of this worker's replicas: a reply that what a call
    // names is missing may only mean "not declared again yet" when such a
    // window overlapped the call. declarations_seen() at the send, then
    // after_declarations() on such a reply: waits (within the deadline) for
    // the window to end; true: ask again.
    uint64_t declarations_seen();
    bool after_declarations(uint64_t seen_at_send, const Deadline &deadline);
    // After registering again: the mismatch reports of the last lease.
    void resend_reports(const Deadline &deadline);
    void send_report(uint64_t worker, uint64_t replica, const std::string &why, const std::vector<uint32_t> &chunks,
                     bool stalled, const Deadline &deadline, bool recover);
    void heartbeat_loop();
    // rpc->call; with servers to fail over to, watch_calls() knows the call
    // is waiting.
    wire::Bytes exchange(const std::shared_ptr<RpcClient> &rpc, const wire::Bytes &request, const Deadline &deadline);
    // With servers to fail over to, on a thread of its own: while a call has
    // been waiting on the server in use for a while, checks now and then
    // whether that server is gone, and moves on at once if it is: in etcd
    // mode when etcd names another leader (follow_if_etcd_moved), with a
    // list when the server has no connection (leave_if_disconnected).
    void watch_calls();
    void follow_if_etcd_moved();
    void leave_if_disconnected();
    // Whether the last Hello gave the server the UCX address we have now.
    bool registered_address_is_current();
    void on_event(const uint8_t *data, size_t size);
    // The server in use: servers_[current_], reached through rpc_. Swapped
    // under rpc_mu_ on failover; callers hold their own reference.
    std::shared_ptr<RpcClient> rpc();
    // Index of the answering server with the newest epoch (0 if none answers).
    size_t newest_server(const Deadline &deadline);
    // Moves on from the server `from` (unless another thread did) and
    // registers there: the next of the list, or the leader etcd names then
    // (deposed: `from` said it does not lead; wait for etcd to name another).
    void fail_over(const std::shared_ptr<RpcClient> &from, const std::string &why, bool deposed,
                   const Deadline &deadline);
    // fail_over() within a call: its errors only end the call once the
    // deadline has passed (the call's loop tries again before).
    void try_fail_over(const std::shared_ptr<RpcClient> &from, const std::string &why, bool deposed,
                       const Deadline &deadline);
    // Back from `from`, which list-mode failover chose, to the server it
    // replaced (unless another thread moved on meanwhile).
    void go_back(const std::shared_ptr<RpcClient> &from, const std::string &why);
    // Whether rpc is the server in use and we went back to it less than a
    // call's timeout ago (a call that times out there waits on instead of
    // failing over again).
    bool confirmed_alive(const std::shared_ptr<RpcClient> &rpc);
    bool can_fail_over() const { return leader_ != nullptr || servers_.size() > 1; }

    const ClientConfig cfg_;
    uint64_t worker_id_;
    UcxWorker *ucx_ = nullptr;
    SessionListener *listener_ = nullptr;
    std::vector<std::string> servers_;  // list mode
    size_t current_ = 0;
    std::unique_ptr<FollowLeader> leader_;  // etcd mode
    LeaderRecord following_;                // etcd mode: the leader in use
    std::mutex rpc_mu_;
    std::shared_ptr<RpcClient> rpc_;
    // rpc_ when list-mode failover chose it: the server we moved to because
    // the one in use did not answer, and said Hello to.
    std::shared_ptr<RpcClient> failed_over_to_;
    // The server failed_over_to_ replaced: its URL (Hello.left_url), its
    // index in servers_ and rebuilt_by_ before, for going back to it.
    struct Left {
        std::string url;
        size_t index = 0;
        Clock::time_point rebuilt_by;
    } left_;
    // The server go_back() returned to, and until when it counts as alive.
    struct Confirmed {
        std::shared_ptr<RpcClient> rpc;
        Clock::time_point until;
    } confirmed_;
    std::atomic<uint64_t> max_epoch_{0};  // the newest server epoch seen: older servers are stale
    std::atomic<uint64_t> next_request_{1};
    std::atomic<uint64_t> registrations_{0};
    std::mutex hello_mu_;
    std::vector<uint8_t> hello_address_;  // the UCX address the last Hello gave the server
    std::shared_ptr<RpcClient> hello_rpc_;  // and the server it went to; guarded by hello_mu_
    std::vector<UcxWorker::PeerAddress> connect_ahead_;  // guarded by hello_mu_
    std::atomic<uint32_t> lease_ms_{TH_DEFAULT_LEASE_MS};  // the server's, from HelloReply
    std::atomic<Clock::time_point> rebuilt_by_{Clock::time_point{}};
    // Bumped just before a re-registration's Hello and after its last
    // declaration: odd while one is in progress.
    std::mutex declaring_mu_;
    std::condition_variable declaring_cv_;
    uint64_t declaring_seq_ = 0;

    struct SentReport {
        uint64_t worker, replica;
        std::string why;
        std::vector<uint32_t> chunks;
        Clock::time_point until;  // kept for resending until then
    };
    std::mutex reports_mu_;
    std::vector<SentReport> reports_;  // mismatch reports, oldest first

    // Server events (commits) and what they told us.
    std::mutex ev_mu_;
    std::condition_variable ev_cv_;
    std::map<std::string, uint64_t> latest_seen_;
    uint64_t event_seq_ = 0;
    bool event_gap_ = false;
    std::unique_ptr<Subscriber> events_;
    bool told_no_events_ = false;  // that a server publishes none (warned once)

    std::mutex hb_mu_;
    std::condition_variable hb_cv_;
    // Set under hb_mu_ (the heartbeat thread waits on it); read without it
    // by calls, which stop recovering once the worker is leaving.
    std::atomic<bool> stop_{false};
    bool reregister_asked_ = false;  // the UCX worker has a new address
    bool beat_asked_ = false;        // beat_soon()
    std::thread heartbeat_;

    // When each call now waiting on a server started (exchange()), for
    // watch_calls().
    std::mutex watch_mu_;
    std::condition_variable watch_cv_;
    std::multiset<Clock::time_point> waiting_since_;
    bool watch_stop_ = false;
    std::thread watcher_;
};

}  // namespace th
