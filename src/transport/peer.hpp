// The endpoints to one other worker, and how reads from it are made.
//
// A peer has two endpoints ("lanes"): control words are read on one of their
// own, so that such a read does not queue behind chunks on the data lane (over
// tcp, megabytes), and each hop of a replication chain does not pay that wait
// twice. A peer read one-sided also has one data endpoint on each of the
// process's copy workers (UcxOptions::copy_threads), so that several threads
// post its reads.
//
// The read path is chosen per peer from the transports UCX picked for its
// endpoint (ucp_ep_query, UCX >= 1.19): a one-sided GET where a transport
// reads the holder's memory without its CPU (rc, dc, cma, knem, xpmem,
// cuda_ipc, ...), an active-message pull answered by the holder where none
// does (tcp, whose GET UCX emulates on the holder's CPU and which aborts a
// holder resumed after a pause). docs/design.md, "Data plane".
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <ucp/api/ucp.h>

namespace th {

class UcxWorker;

enum class Lane : uint8_t { Data = 0, Control = 1 };

enum class ReadPath : uint8_t {
    OneSided,       // ucp_get_nbx into the destination: no holder CPU, no bounce copy
    ActiveMessage,  // the holder answers a request with the bytes (tcp)
};

const char *read_path_name(ReadPath p);

// Fails (failed() true) on a peer error or when force-closed; every read still
// in flight on it then completes with an error.
class Peer {
  public:
    ~Peer();
    uint64_t worker_id() const { return worker_id_; }
    bool failed() const { return status_.load() != UCS_OK; }
    // Why the endpoint failed ("Endpoint timeout", "closed: no progress"...).
    std::string failure() const;
    // Failed because this process was paused, not because of the peer.
    bool dropped_by_pause() const;
    ReadPath path() const { return path_; }
    // The transports UCX uses for the data lane, e.g. "posix/memory cma/memory".
    const std::string &transports() const { return transports_; }

  private:
    friend class UcxWorker;
    // A peer of worker w with no endpoint yet, and the parameters of an
    // endpoint to its address that reports errors to it.
    static std::shared_ptr<Peer> create(UcxWorker *w, uint64_t worker_id, const std::vector<uint8_t> &address);
    ucp_ep_params_t endpoint_params();
    static void on_error(void *arg, ucp_ep_h ep, ucs_status_t status);
    // Force-closes the endpoints (after destroying the rkeys unpacked for
    // them); returns the close requests still in progress. With close false
    // the main worker's endpoints are only forgotten (that worker was set
    // aside); the copy workers' are closed either way. Caller holds mu_.
    std::vector<void *> drop_endpoints(bool close);
    // Endpoints by slot: the lanes on the main worker first (slot ==
    // Lane), then one data endpoint per copy worker (slot kLanes + i).
    static constexpr size_t kLanes = 2;
    ucp_ep_h &lane(Lane l) { return eps_[static_cast<size_t>(l)]; }
    size_t copy_slots() const { return eps_.size() - kLanes; }
    // The rkey unpacked for a slot's endpoint, unpacked on first use. Caller
    // holds mu_; nullptr with *st set when UCX refuses it.
    ucp_rkey_h rkey(size_t slot, const std::vector<uint8_t> &packed, ucs_status_t *st);
    // Reads which transports the data lane uses and picks the read path.
    void choose_path(bool one_sided_allowed);

    UcxWorker *worker_ = nullptr;
    uint64_t worker_id_ = 0;
    // By slot. Its size is fixed before the peer is shared (a slot that is
    // dropped becomes nullptr), so it may be read without mu_.
    std::vector<ucp_ep_h> eps_ = std::vector<ucp_ep_h>(kLanes, nullptr);
    std::vector<uint8_t> address_;      // the peer's, as connected to
    ReadPath path_ = ReadPath::ActiveMessage;
    std::string transports_;
    // Unpacked rkeys by their packed bytes, per slot.
    struct PackedHash {
        size_t operator()(const std::vector<uint8_t> &v) const noexcept {
            return std::hash<std::string_view>{}(std::string_view(reinterpret_cast<const char *>(v.data()), v.size()));
        }
    };
    std::vector<std::unordered_map<std::vector<uint8_t>, ucp_rkey_h, PackedHash>> rkeys_ =
        std::vector<std::unordered_map<std::vector<uint8_t>, ucp_rkey_h, PackedHash>>(kLanes);
    // UCS_OK while usable; set once, by the error handler (progress thread,
    // which must not take mu_) or by a forced close.
    std::atomic<int> status_{UCS_OK};
    std::mutex mu_;
    std::mutex greeting_;  // held while its creator greets it (UcxWorker::greet)
    // It answered the greeting on every lane. A greeting can fail before the
    // endpoint's error handler runs (a connection that failed in progress):
    // not failed() yet, but not up either.
    std::atomic<bool> greeted_{false};
};
using PeerRef = std::shared_ptr<Peer>;

}  // namespace th
