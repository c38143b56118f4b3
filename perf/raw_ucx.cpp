#include "raw_ucx.hpp"

#include <poll.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace th_bench {

namespace {

void check(ucs_status_t st, const char *what) {
    if (st != UCS_OK) fail(what, ": ", ucs_status_string(st));
}

// Waits for a request from a non-blocking call, progressing the worker.
ucs_status_t wait_request(ucp_worker_h worker, ucs_status_ptr_t req, Clock::time_point deadline) {
    if (!UCS_PTR_IS_PTR(req)) return UCS_PTR_STATUS(req);
    ucs_status_t st;
    while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS && Clock::now() < deadline) ucp_worker_progress(worker);
    ucp_request_free(req);
    return st;
}

// The pull protocol: a request per read, answered in pieces of at most
// kPiece bytes (what UCX sends over tcp straight from registered memory, as
// libtensorhub's holder does: src/transport/reads.hpp), each at its offset.
constexpr unsigned kPullId = 1, kAnswerId = 2;
constexpr uint64_t kPiece = 128 << 10;
struct AnswerHeader {
    uint64_t read, offset;
    int64_t status;  // a ucs_status_t; UCS_OK: the payload is the bytes
};

void set_am_handler(ucp_worker_h worker, unsigned id, ucp_am_recv_callback_t cb, void *arg) {
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = id;
    hp.cb = cb;
    hp.arg = arg;
    check(ucp_worker_set_am_recv_handler(worker, &hp), "ucp_worker_set_am_recv_handler");
}

// Sends one answer (its header kept until UCX is done with it): n bytes at
// bytes from memh, or the header alone.
void send_answer(ucp_ep_h ep, const AnswerHeader &header, const uint8_t *bytes, size_t n, ucp_mem_h memh) {
    auto *h = new AnswerHeader(header);
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    prm.flags = UCP_AM_SEND_FLAG_EAGER;
    prm.user_data = h;
    prm.cb.send = [](void *request, ucs_status_t, void *user_data) {
        ucp_request_free(request);
        delete static_cast<AnswerHeader *>(user_data);
    };
    if (memh != nullptr) {
        prm.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        prm.memh = memh;
    }
    ucs_status_ptr_t req = ucp_am_send_nbx(ep, kAnswerId, h, sizeof *h, bytes, n, &prm);
    if (!UCS_PTR_IS_PTR(req)) delete h;  // done, or refused: the reader's deadline tells
}

ucs_memory_type_t ucs_memory(const Buffer &buf) {
    return buf.memory() == Memory::Cuda ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
}

// A worker of context as libtensorhub makes its own (UCS_THREAD_MODE_MULTI).
ucs_status_t create_worker(ucp_context_h context, ucp_worker_h *out) {
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_MULTI;
    return ucp_worker_create(context, &wp, out);
}

}  // namespace

RawWorker::RawWorker() {
    ucp_config_t *config = nullptr;
    check(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    params.mt_workers_shared = 1;
    ucs_status_t st = ucp_init(&params, config, &context_);
    ucp_config_release(config);
    check(st, "ucp_init");
    st = create_worker(context_, &worker_);
    if (st != UCS_OK) {
        ucp_cleanup(context_);
        check(st, "ucp_worker_create");
    }
}

RawWorker::~RawWorker() {
    for (ucp_worker_h w : more_) ucp_worker_destroy(w);
    ucp_worker_destroy(worker_);
    ucp_cleanup(context_);
}

ucp_worker_h RawWorker::add_worker() {
    ucp_worker_h w = nullptr;
    check(create_worker(context_, &w), "ucp_worker_create");
    more_.push_back(w);
    return w;
}

std::vector<uint8_t> RawWorker::address() const {
    ucp_address_t *addr = nullptr;
    size_t len = 0;
    check(ucp_worker_get_address(worker_, &addr, &len), "ucp_worker_get_address");
    std::vector<uint8_t> out(reinterpret_cast<uint8_t *>(addr), reinterpret_cast<uint8_t *>(addr) + len);
    ucp_worker_release_address(worker_, addr);
    return out;
}

RawRegion::RawRegion(ucp_context_h context, const Buffer &buf) : context_(context) {
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
    mp.address = buf.data();
    mp.length = buf.size();
    mp.memory_type = ucs_memory(buf);
    check(ucp_mem_map(context_, &mp, &memh_), "ucp_mem_map");
}

RawRegion::~RawRegion() { ucp_mem_unmap(context_, memh_); }

std::vector<uint8_t> RawRegion::packed_rkey() const {
    void *buf = nullptr;
    size_t len = 0;
    check(ucp_rkey_pack(context_, memh_, &buf, &len), "ucp_rkey_pack");
    std::vector<uint8_t> out(static_cast<uint8_t *>(buf), static_cast<uint8_t *>(buf) + len);
    ucp_rkey_buffer_release(buf);
    return out;
}

RawTarget::RawTarget() {
    set_am_handler(ucx_.worker(), kPullId, &RawTarget::on_pull, this);
    progress_ = std::thread([this] { progress_loop(); });
}

RawTarget::~RawTarget() {
    stop_ = true;
    ucp_worker_signal(ucx_.worker());
    progress_.join();
}

std::vector<uint8_t> RawTarget::expose(const Buffer &buf) {
    std::lock_guard lk(mu_);
    region_.reset();
    region_ = std::make_unique<RawRegion>(ucx_.context(), buf);
    exposed_ = &buf;
    return region_->packed_rkey();
}

void RawTarget::unexpose() {
    std::lock_guard lk(mu_);
    exposed_ = nullptr;
    region_.reset();
}

// Answers a pull inside the handler (the reply endpoint is only known to be
// valid until it returns), from the exposed buffer, under mu_ (expose and
// unexpose take it too; the benchmark changes buffers only while no read is
// in flight).
ucs_status_t RawTarget::on_pull(void *arg, const void *header, size_t header_length, void *data, size_t,
                                const ucp_am_recv_param_t *param) {
    auto *t = static_cast<RawTarget *>(arg);
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ucp_am_data_release(t->ucx_.worker(), data);
    if (header_length != sizeof(PullHeader) || !(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)) return UCS_OK;
    PullHeader h;
    std::memcpy(&h, header, sizeof h);
    std::lock_guard lk(t->mu_);
    const Buffer *b = t->exposed_;
    if (b == nullptr || b->memory() != Memory::Host || h.offset > b->size() || h.length > b->size() - h.offset) {
        send_answer(param->reply_ep, {h.read, h.offset, UCS_ERR_INVALID_PARAM}, nullptr, 0, nullptr);
        return UCS_OK;
    }
    for (uint64_t off = 0; off < h.length; off += kPiece)
        send_answer(param->reply_ep, {h.read, h.offset + off, UCS_OK}, b->data() + h.offset + off,
                    std::min(kPiece, h.length - off), t->region_->memh());
    return UCS_OK;
}

// The same loop as libtensorhub's progress thread: drain, arm, sleep on the
// event fd (the poll timeout only bounds a missed wake-up).
void RawTarget::progress_loop() {
    int efd = -1;
    if (ucp_worker_get_efd(ucx_.worker(), &efd) != UCS_OK) efd = -1;
    while (!stop_.load(std::memory_order_relaxed)) {
        while (ucp_worker_progress(ucx_.worker()) != 0) {
        }
        if (efd < 0) {
            std::this_thread::sleep_for(std::chrono::microseconds(50));
            continue;
        }
        if (ucp_worker_arm(ucx_.worker()) == UCS_ERR_BUSY) continue;
        pollfd pfd{efd, POLLIN, 0};
        poll(&pfd, 1, 100);
    }
}

RawReader::~RawReader() {
    unbind();
    for (auto &s : streams_) {
        ucp_request_param_t prm{};
        prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        prm.flags = UCP_EP_CLOSE_FLAG_FORCE;
        wait_request(s->worker, ucp_ep_close_nbx(s->ep, &prm), Clock::now() + std::chrono::seconds(5));
    }
}

void RawReader::on_error(void *arg, ucp_ep_h, ucs_status_t status) {
    int expected = UCS_OK;
    static_cast<Stream *>(arg)->ep_status.compare_exchange_strong(expected, status);
}

void RawReader::add_stream(ucp_worker_h worker) {
    auto s = std::make_unique<Stream>();
    s->worker = worker;
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t *>(target_.data());
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = &RawReader::on_error;
    ep.err_handler.arg = s.get();
    check(ucp_ep_create(worker, &ep, &s->ep), "ucp_ep_create");
    set_am_handler(worker, kAnswerId, &RawReader::on_answer, s.get());
    streams_.push_back(std::move(s));
}

void RawReader::connect(const std::vector<uint8_t> &target_address) {
    if (!streams_.empty()) fail("already connected");
    target_ = target_address;
    add_stream(ucx_.worker());
}

void RawReader::widen(unsigned workers) {
    if (streams_.empty()) fail("not connected");
    while (streams_.size() < workers) {
        add_stream(ucx_.add_worker());
        if (local_ != nullptr) unpack_rkey(*streams_.back());  // a bound buffer is read through it too
    }
}

void RawReader::unpack_rkey(Stream &s) {
    check(ucp_ep_rkey_unpack(s.ep, packed_rkey_.data(), &s.rkey), "ucp_ep_rkey_unpack");
}

// UCX 1.13 has no query for an endpoint's transports, only a printout; its
// lane lines read "lane[0]:  1:tcp/lo.0 md[1] -> ...".
std::string RawReader::transports() const {
    if (streams_.empty()) fail("not connected");
    char *text = nullptr;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == nullptr) fail("open_memstream failed");
    ucp_ep_print_info(streams_[0]->ep, f);
    std::fclose(f);
    std::string info(text, len);
    std::free(text);
    std::vector<std::string> found;
    for (const auto &line : split(info, '\n')) {
        auto words = split(line);
        for (size_t i = 0; i + 1 < words.size(); ++i) {
            if (words[i].rfind("lane[", 0) != 0) continue;
            std::string tl = words[i + 1].substr(words[i + 1].find(':') + 1);
            if (std::find(found.begin(), found.end(), tl) == found.end()) found.push_back(tl);
        }
    }
    std::string out;
    for (const auto &t : found) out += (out.empty() ? "" : ",") + t;
    return out.empty() ? "unknown" : out;
}

void RawReader::bind(uint64_t remote, const std::vector<uint8_t> &packed_rkey, const Buffer &local) {
    if (streams_.empty()) fail("not connected");
    unbind();
    packed_rkey_ = packed_rkey;
    for (auto &s : streams_) unpack_rkey(*s);
    remote_ = remote;
    local_ = &local;
    local_region_ = std::make_unique<RawRegion>(ucx_.context(), local);
}

void RawReader::unbind() {
    for (auto &s : streams_) {
        if (s->rkey != nullptr) ucp_rkey_destroy(s->rkey);
        s->rkey = nullptr;
    }
    local_region_.reset();
    local_ = nullptr;
}

void RawReader::on_get_done(void *request, ucs_status_t status, void *user_data) {
    auto *s = static_cast<Stream *>(user_data);
    s->inflight--;
    if (status != UCS_OK) s->get_status = status;
    ucp_request_free(request);
}

void RawReader::check_healthy(const Stream &s) {
    if (s.get_status != UCS_OK) fail("a read failed: ", ucs_status_string(s.get_status));
    if (s.ep_status.load() != UCS_OK)
        fail("endpoint failed: ", ucs_status_string(static_cast<ucs_status_t>(s.ep_status.load())));
}

void RawReader::run_window(Stream &s, size_t count, unsigned inflight, Clock::time_point deadline, bool wait_on_events,
                           const char *what, const std::function<bool(size_t)> &post) {
    int efd = -1;
    if (wait_on_events && ucp_worker_get_efd(s.worker, &efd) != UCS_OK) fail("the worker has no event fd");
    if (s.inflight != 0) fail(what, " of an earlier read are still in flight");
    s.get_status = UCS_OK;
    for (size_t next = 0; next < count || s.inflight > 0;) {
        while (s.inflight < inflight && next < count)
            if (post(next++)) s.inflight++;
        bool progressed = ucp_worker_progress(s.worker) != 0;
        if (wait_on_events && !progressed && ucp_worker_arm(s.worker) == UCS_OK) {
            pollfd pfd{efd, POLLIN, 0};
            poll(&pfd, 1, 10);
        }
        check_healthy(s);
        if (Clock::now() > deadline) fail(what, " did not complete in time (", s.inflight, " still in flight)");
    }
}

void RawReader::read_range(Stream &s, size_t begin, size_t end, size_t chunk, unsigned inflight,
                           Clock::time_point deadline, bool wait_on_events) {
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMH |
                       UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    prm.cb.send = &RawReader::on_get_done;
    prm.user_data = &s;
    prm.memh = local_region_->memh();
    prm.memory_type = ucs_memory(*local_);
    run_window(s, (end - begin + chunk - 1) / chunk, inflight, deadline, wait_on_events, "GETs", [&](size_t i) {
        size_t offset = begin + i * chunk, len = std::min(chunk, end - offset);
        ucs_status_ptr_t req = ucp_get_nbx(s.ep, local_->data() + offset, len, remote_ + offset, s.rkey, &prm);
        if (UCS_PTR_IS_ERR(req)) fail("ucp_get_nbx: ", ucs_status_string(UCS_PTR_STATUS(req)));
        return UCS_PTR_IS_PTR(req);  // else done already
    });
}

// Copies an answer into place; runs inside ucp_worker_progress on the thread
// that reads. A wrong answer fails the read (check_healthy).
ucs_status_t RawReader::on_answer(void *arg, const void *header, size_t header_length, void *data, size_t length,
                                  const ucp_am_recv_param_t *param) {
    auto *s = static_cast<Stream *>(arg);
    AnswerHeader h{};
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
        ucp_am_data_release(s->worker, data);
        s->get_status = UCS_ERR_UNSUPPORTED;  // answers are sent eagerly
    } else if (header_length != sizeof h) {
        s->get_status = UCS_ERR_MESSAGE_TRUNCATED;
    } else {
        std::memcpy(&h, header, sizeof h);
        if (h.status != UCS_OK) {
            s->get_status = static_cast<ucs_status_t>(h.status);
        } else if (s->pull_into == nullptr || h.read >= s->pull_left.size() || h.offset > s->pull_size ||
                   length > s->pull_size - h.offset || length == 0 || length > s->pull_left[h.read]) {
            s->get_status = UCS_ERR_MESSAGE_TRUNCATED;
        } else {
            std::memcpy(s->pull_into + h.offset, data, length);
            if ((s->pull_left[h.read] -= length) == 0) s->inflight--;
        }
    }
    return UCS_OK;
}

double RawReader::pull_all(size_t chunk, unsigned inflight, Clock::time_point deadline) {
    if (local_ == nullptr) fail("no buffer bound");
    if (local_->memory() != Memory::Host) fail("pulls read into host memory only");
    Stream &s = *streams_[0];
    const size_t n = local_->size(), reads = (n + chunk - 1) / chunk;
    s.pull_into = local_->data();
    s.pull_size = n;
    s.pull_left.assign(reads, 0);
    // Kept until the next call: UCX reads a request's header until it is sent.
    pull_headers_.assign(reads, PullHeader{});
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_FLAGS;
    prm.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER;
    prm.cb.send = [](void *request, ucs_status_t, void *) { ucp_request_free(request); };
    auto t0 = Clock::now();
    run_window(s, reads, inflight, deadline, /*wait_on_events=*/false, "pulls", [&](size_t i) {
        uint64_t offset = i * chunk, len = std::min<uint64_t>(chunk, n - offset);
        pull_headers_[i] = {i, offset, len};
        s.pull_left[i] = len;
        ucs_status_ptr_t req = ucp_am_send_nbx(s.ep, kPullId, &pull_headers_[i], sizeof(PullHeader), nullptr, 0, &prm);
        if (UCS_PTR_IS_ERR(req)) fail("ucp_am_send_nbx: ", ucs_status_string(UCS_PTR_STATUS(req)));
        return true;  // in flight until its last answer lands (on_answer)
    });
    s.pull_into = nullptr;
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

double RawReader::read_all(size_t chunk, unsigned inflight, Clock::time_point deadline, bool wait_on_events) {
    if (local_ == nullptr) fail("no buffer bound");
    const size_t n = local_->size();
    const size_t k = streams_.size();
    auto t0 = Clock::now();
    if (k == 1) {
        read_range(*streams_[0], 0, n, chunk, inflight, deadline, wait_on_events);
        return std::chrono::duration<double>(Clock::now() - t0).count();
    }
    // Each worker reads a contiguous share, whole chunks, on a thread of its own.
    const size_t chunks = (n + chunk - 1) / chunk;
    const unsigned window = std::max(1u, inflight / static_cast<unsigned>(k));
    std::vector<std::string> errors(k);
    std::vector<std::thread> threads;
    for (size_t i = 0; i < k; ++i) {
        size_t begin = std::min(n, chunks * i / k * chunk), end = std::min(n, chunks * (i + 1) / k * chunk);
        threads.emplace_back([&, i, begin, end] {
            try {
                read_range(*streams_[i], begin, end, chunk, window, deadline, wait_on_events);
            } catch (const std::exception &e) {
                errors[i] = e.what();
            }
        });
    }
    for (auto &t : threads) t.join();
    for (const auto &e : errors)
        if (!e.empty()) fail(e);
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace th_bench
