#include "driver.hpp"

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

namespace th_load {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kReplyTimeoutMs = 10000;

struct Client {
    nng_socket sock = NNG_SOCKET_INITIALIZER;
    nng_ctx ctx = NNG_CTX_INITIALIZER;
    nng_aio *aio = nullptr;
    std::string error;

    explicit Client(const std::string &url) {
        int rv = nng_req0_open(&sock);
        if (rv == 0) rv = nng_socket_set_ms(sock, NNG_OPT_REQ_RESENDTIME, 60000);
        if (rv == 0) rv = nng_dial(sock, url.c_str(), nullptr, 0);
        if (rv == 0) rv = nng_ctx_open(&ctx, sock);
        if (rv == 0) rv = nng_aio_alloc(&aio, nullptr, nullptr);
        if (rv != 0) error = std::string("cannot connect to ") + url + ": " + nng_strerror(rv);
        if (aio) nng_aio_set_timeout(aio, kReplyTimeoutMs);
    }
    ~Client() {
        if (aio) nng_aio_free(aio);
        nng_close(sock);
    }

    // The reply message (caller frees), or nullptr with error set.
    nng_msg *round_trip(const Bytes &request) {
        nng_msg *msg = nullptr;
        if (int rv = nng_msg_alloc(&msg, request.size()); rv != 0) return failed("nng_msg_alloc", rv);
        std::copy(request.begin(), request.end(), static_cast<uint8_t *>(nng_msg_body(msg)));
        nng_aio_set_msg(aio, msg);
        nng_ctx_send(ctx, aio);
        nng_aio_wait(aio);
        if (int rv = nng_aio_result(aio); rv != 0) {
            nng_msg_free(msg);
            return failed("send", rv);
        }
        nng_ctx_recv(ctx, aio);
        nng_aio_wait(aio);
        if (int rv = nng_aio_result(aio); rv != 0) return failed("receive", rv);
        return nng_aio_get_msg(aio);
    }

    nng_msg *failed(const char *what, int rv) {
        error = std::string(what) + ": " + nng_strerror(rv);
        return nullptr;
    }
};

}  // namespace

uint64_t RunStats::requests() const {
    uint64_t n = 0;
    for (const auto &[kind, v] : latency_us) n += v.size();
    return n;
}

double quantile(std::vector<float> &v, double q) {
    if (v.empty()) return 0;
    size_t i = std::min(v.size() - 1, static_cast<size_t>(q * double(v.size())));
    std::nth_element(v.begin(), v.begin() + i, v.end());
    return v[i];
}

RunStats drive(const std::string &url, unsigned threads, double seconds, const MakeCall &make, const CheckReply &check) {
    RunStats total;
    std::mutex mu;
    auto start = Clock::now();
    auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    auto loop = [&](unsigned t) {
        std::map<Kind, std::vector<float>> lat;
        uint64_t errors = 0;
        std::string first_error;
        Client client(url);
        if (!client.error.empty()) {
            errors++;
            first_error = client.error;
        }
        for (uint64_t n = 0; client.error.empty() && (seconds <= 0 || Clock::now() < end); ++n) {
            std::optional<Call> call = make(t, n);
            if (!call) break;
            auto sent = Clock::now();
            nng_msg *reply = client.round_trip(call->bytes);
            auto got = Clock::now();
            if (reply == nullptr) {
                errors++;
                first_error = client.error;
                break;
            }
            std::string wrong = check(*call, static_cast<const uint8_t *>(nng_msg_body(reply)), nng_msg_len(reply));
            nng_msg_free(reply);
            if (!wrong.empty()) {
                if (errors++ == 0) first_error = std::string(kind_name(call->kind)) + ": " + wrong;
                continue;
            }
            lat[call->kind].push_back(std::chrono::duration<float, std::micro>(got - sent).count());
        }
        std::lock_guard lk(mu);
        for (auto &[kind, v] : lat) total.latency_us[kind].insert(total.latency_us[kind].end(), v.begin(), v.end());
        if (errors && total.errors == 0) total.first_error = first_error;
        total.errors += errors;
    };
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) pool.emplace_back(loop, t);
    for (auto &th : pool) th.join();
    total.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return total;
}

}  // namespace th_load
