// The baseline: plain UCX reads, with the data plane configured the way
// libtensorhub configures its own (src/transport/worker.cpp): RMA|AM|WAKEUP
// context, UCS_THREAD_MODE_MULTI worker, peer error handling on endpoints,
// registered memory, and an event-driven progress thread on the side that
// is read from (over tcp the target must progress or GETs hang). Two ways to
// read: one-sided GETs, and active-message pulls (a request per read, which
// the target answers in eager pieces sent from its registered memory, copied
// into place by the reader), the fastest plain way over tcp, where UCX only
// emulates a GET. The reader side busy-polls its worker, which is the
// fastest way to drive either pipeline: the faster of the two is the
// physical limit tensorhub is compared with.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <ucp/api/ucp.h>

#include "bench_memory.hpp"
#include "bench_util.hpp"

namespace th_bench {

// A pull: read `length` bytes at `offset` of the exposed buffer (raw_ucx.cpp).
struct PullHeader {
    uint64_t read = 0, offset = 0, length = 0;
};

// One UCX context and its worker, and further workers of the same context
// on request (a reader that posts GETs from several threads).
class RawWorker {
  public:
    RawWorker();
    ~RawWorker();
    RawWorker(const RawWorker &) = delete;
    RawWorker &operator=(const RawWorker &) = delete;

    ucp_context_h context() const { return context_; }
    ucp_worker_h worker() const { return worker_; }
    std::vector<uint8_t> address() const;
    // Another worker of the context, destroyed with this.
    ucp_worker_h add_worker();

  private:
    ucp_context_h context_ = nullptr;
    ucp_worker_h worker_ = nullptr;
    std::vector<ucp_worker_h> more_;
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
    void unexpose();

  private:
    void progress_loop();
    static ucs_status_t on_pull(void *arg, const void *header, size_t header_length, void *data, size_t length,
                                const ucp_am_recv_param_t *param);

    RawWorker ucx_;
    std::mutex mu_;  // exposing and answering
    std::unique_ptr<RawRegion> region_;
    const Buffer *exposed_ = nullptr;  // what region_ registers; answered from
    std::atomic<bool> stop_{false};
    std::thread progress_;
};

// The side that reads: one endpoint per worker, chunked GETs with a bounded
// window. With several workers (widen) each thread reads its share of the
// buffer through its own worker, as libtensorhub's copy workers do
// (th_client_config.copy_threads).
class RawReader {
  public:
    RawReader() = default;
    ~RawReader();
    void connect(const std::vector<uint8_t> &target_address);
    // Reads from `workers` workers from now on (at least 1; connected first),
    // the bound buffer too.
    void widen(unsigned workers);
    unsigned workers() const { return static_cast<unsigned>(streams_.size()); }
    // The transports the endpoint's lanes use, e.g. "tcp/lo.0".
    std::string transports() const;
    // The remote buffer to read and the local buffer to read it into.
    void bind(uint64_t remote, const std::vector<uint8_t> &packed_rkey, const Buffer &local);
    void unbind();
    // Reads the whole remote buffer with GETs of `chunk` bytes, at most
    // `inflight` at a time (split evenly among the workers); returns the
    // seconds it took. Busy-polls the workers unless `wait_on_events` is set:
    // then it sleeps on the worker's event fd between completions, as a
    // tensorhub reader does, which is what many readers sharing few cores need.
    double read_all(size_t chunk, unsigned inflight, Clock::time_point deadline, bool wait_on_events = false);
    // The same with active-message pulls of `chunk` bytes through the first
    // worker (host memory only); returns the seconds it took.
    double pull_all(size_t chunk, unsigned inflight, Clock::time_point deadline);

  private:
    // One worker's endpoint and the state of its GETs. Completion state lives
    // here rather than in locals: after a failed read_all, GETs still in
    // flight may complete into it.
    struct Stream {
        ucp_worker_h worker = nullptr;
        ucp_ep_h ep = nullptr;
        std::atomic<int> ep_status{UCS_OK};
        ucp_rkey_h rkey = nullptr;
        unsigned inflight = 0;
        ucs_status_t get_status = UCS_OK;
        // Pulls: where answers go, and the bytes each read still waits for.
        uint8_t *pull_into = nullptr;
        size_t pull_size = 0;
        std::vector<size_t> pull_left;
    };
    static void on_error(void *arg, ucp_ep_h ep, ucs_status_t status);
    static ucs_status_t on_answer(void *arg, const void *header, size_t header_length, void *data, size_t length,
                                  const ucp_am_recv_param_t *param);
    static void on_get_done(void *request, ucs_status_t status, void *user_data);
    static void check_healthy(const Stream &s);
    void add_stream(ucp_worker_h worker);
    // The bound buffer's rkey, for s's endpoint.
    void unpack_rkey(Stream &s);
    // Reads [begin, end) of the buffer through s; throws on a failure.
    void read_range(Stream &s, size_t begin, size_t end, size_t chunk, unsigned inflight, Clock::time_point deadline,
                    bool wait_on_events);
    // The window both ways of reading share: posts reads 0..count-1 through
    // s, at most `inflight` outstanding (post(i) posts read i and says
    // whether it is still in flight: completions decrement s.inflight), and
    // progresses s's worker until all are done; throws on a failed read or
    // at the deadline (`what`: "GETs", "pulls"). Sleeps on the event fd
    // between completions if wait_on_events.
    void run_window(Stream &s, size_t count, unsigned inflight, Clock::time_point deadline, bool wait_on_events,
                    const char *what, const std::function<bool(size_t)> &post);

    RawWorker ucx_;
    std::vector<uint8_t> target_;
    std::vector<std::unique_ptr<Stream>> streams_;
    std::vector<PullHeader> pull_headers_;  // pull_all's requests
    uint64_t remote_ = 0;
    std::vector<uint8_t> packed_rkey_;  // the bound buffer's
    const Buffer *local_ = nullptr;
    std::unique_ptr<RawRegion> local_region_;
};

}  // namespace th_bench
