#include "driver.hpp"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

#include "control/requests.hpp"

namespace th_load {

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kReplyTimeoutMs = 10000;

// A connection of its own, as each tensorhub client has: the library's
// request path (control/requests.hpp), not a stand-in for it.
struct Client {
    std::unique_ptr<th::Requests> requests;
    std::string error;

    explicit Client(const std::string &url) {
        try {
            requests = th::dial_requests(url);
        } catch (const std::exception &e) {
            error = std::string("cannot connect to ") + url + ": " + e.what();
        }
    }

    // The reply, or nullopt with error set.
    std::optional<th::wire::Bytes> round_trip(const Bytes &request) {
        auto reply = requests->exchange(request, th::Deadline(kReplyTimeoutMs));
        if (auto *bytes = std::get_if<th::wire::Bytes>(&reply)) return std::move(*bytes);
        error = std::get<th::RequestFailure>(reply).text;
        return std::nullopt;
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
            std::optional<th::wire::Bytes> reply = client.round_trip(call->bytes);
            auto got = Clock::now();
            if (!reply) {
                errors++;
                first_error = client.error;
                break;
            }
            std::string wrong = check(*call, reply->data(), reply->size());
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
