// The baseline: plain UCX one-sided GETs, with the data plane configured the
// way libtensorhub configures its own (src/transport/worker.cpp): RMA|WAKEUP
// context, UCS_THREAD_MODE_MULTI worker, peer error handling on endpoints,
// registered destination memory, and an event-driven progress thread on the
// side that is read from (over tcp the target must progress or GETs hang).
// The reader side busy-polls its worker, which is the fastest way to drive a
// GET pipeline: this is the physical limit tensorhub is compared with.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <ucp/api/ucp.h>

#include "bench_memory.hpp"
#include "bench_util.hpp"

namespace th_bench {

// One UCX context and worker.
class RawWorker {
  public:
    RawWorker();
    ~RawWorker();
    RawWorker(const RawWorker &) = delete;
    RawWorker &operator=(const RawWorker &) = delete;

    ucp_context_h context() const { return context_; }
    ucp_worker_h worker() const { return worker_; }
    std::vector<uint8_t> address() const;

  private:
    ucp_context_h context_ = nullptr;
    ucp_worker_h worker_ = nullptr;
};

// A buffer registered with a context.
class RawRegion {
  public:
    explicit RawRegion(ucp_context_h context, const Buffer &buf);
    ~RawRegion();
    RawRegion(const RawRegion &) = delete;
    RawRegion &operator=(const RawRegion &) = delete;

    ucp_mem_h memh() const { return memh_; }
    std::vector<uint8_t> packed_rkey() const;

  private:
    ucp_context_h context_;
    ucp_mem_h memh_ = nullptr;
};

// The side that is read from: exposes buffers and progresses its worker on a
// thread that sleeps on the worker's event fd, like a tensorhub publisher.
class RawTarget {
  public:
    RawTarget();
    ~RawTarget();
    std::vector<uint8_t> address() const { return ucx_.address(); }
    // Registers buf (replacing what was exposed before); returns its rkey.
    std::vector<uint8_t> expose(const Buffer &buf);
    void unexpose() { region_.reset(); }

  private:
    void progress_loop();

    RawWorker ucx_;
    std::unique_ptr<RawRegion> region_;
    std::atomic<bool> stop_{false};
    std::thread progress_;
};

// The side that reads: one endpoint, chunked GETs with a bounded window.
class RawReader {
  public:
    RawReader() = default;
    ~RawReader();
    void connect(const std::vector<uint8_t> &target_address);
    // The transports the endpoint's lanes use, e.g. "tcp/lo.0".
    std::string transports() const;
    // The remote buffer to read and the local buffer to read it into.
    void bind(uint64_t remote, const std::vector<uint8_t> &packed_rkey, const Buffer &local);
    void unbind();
    // Reads the whole remote buffer with GETs of `chunk` bytes, at most
    // `inflight` at a time; returns the seconds it took. Busy-polls the worker
    // unless `wait_on_events` is set: then it sleeps on the worker's event fd between
    // completions, as a tensorhub reader does, which is what many readers
    // sharing few cores need.
    double read_all(size_t chunk, unsigned inflight, Clock::time_point deadline, bool wait_on_events = false);

  private:
    static void on_error(void *arg, ucp_ep_h ep, ucs_status_t status);
    static void on_get_done(void *request, ucs_status_t status, void *user_data);
    void check_healthy() const;

    RawWorker ucx_;
    ucp_ep_h ep_ = nullptr;
    std::atomic<int> ep_status_{UCS_OK};
    ucp_rkey_h rkey_ = nullptr;
    uint64_t remote_ = 0;
    const Buffer *local_ = nullptr;
    std::unique_ptr<RawRegion> local_region_;
    // Completion state of read_all. Members rather than locals: after a failed
    // read_all, GETs still in flight may complete into them.
    unsigned inflight_ = 0;
    ucs_status_t get_status_ = UCS_OK;
};

}  // namespace th_bench
