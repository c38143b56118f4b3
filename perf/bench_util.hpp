// Small helpers shared by the benchmark's processes: errors, page-backed
// buffers, hex encoding for passing UCX blobs as text, and statistics.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace th_bench {

using Clock = std::chrono::steady_clock;

struct BenchError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

template <typename... T>
std::string str(const T &...parts) {
    std::ostringstream os;
    (os << ... << parts);
    return os.str();
}

template <typename... T>
[[noreturn]] void fail(const T &...parts) {
    throw BenchError(str(parts...));
}

// Anonymous mmap: page aligned (what registration likes) and, unlike a
// std::vector, not touched on allocation, so faulting in is an explicit,
// untimed step.
class PageBuffer {
  public:
    PageBuffer() = default;
    explicit PageBuffer(size_t n) : size_(n) {
        void *p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) fail("cannot allocate ", n, " bytes: ", std::strerror(errno));
        data_ = static_cast<uint8_t *>(p);
    }
    PageBuffer(PageBuffer &&o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
    PageBuffer &operator=(PageBuffer &&o) noexcept {
        std::swap(data_, o.data_);
        std::swap(size_, o.size_);
        return *this;
    }
    ~PageBuffer() {
        if (data_ != nullptr) munmap(data_, size_);
    }
    uint8_t *data() const { return data_; }
    size_t size() const { return size_; }
    // Faults every page in, so page faults stay out of the timed transfer.
    void clear() { std::memset(data_, 0, size_); }

  private:
    uint8_t *data_ = nullptr;
    size_t size_ = 0;
};

inline std::string to_hex(const void *p, size_t n) {
    static const char digits[] = "0123456789abcdef";
    std::string out;
    out.reserve(2 * n);
    for (size_t i = 0; i < n; ++i) {
        uint8_t b = static_cast<const uint8_t *>(p)[i];
        out += digits[b >> 4];
        out += digits[b & 15];
    }
    return out;
}

inline std::vector<uint8_t> from_hex(const std::string &s) {
    auto nibble = [&](char c) -> uint8_t {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        fail("bad hex digit '", c, "'");
    };
    if (s.size() % 2) fail("hex string of odd length");
    std::vector<uint8_t> out(s.size() / 2);
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(nibble(s[2 * i]) << 4 | nibble(s[2 * i + 1]));
    return out;
}

inline std::vector<std::string> split(const std::string &s, char sep = ' ') {
    std::vector<std::string> out;
    std::string cur;
    std::istringstream is(s);
    while (std::getline(is, cur, sep))
        if (!cur.empty()) out.push_back(cur);
    return out;
}

inline uint64_t to_u64(const std::string &s) {
    size_t used = 0;
    uint64_t v = 0;
    try {
        v = std::stoull(s, &used, 0);
    } catch (const std::exception &) {
        used = 0;
    }
    if (used == 0 || used != s.size()) fail("'", s, "' is not a number");
    return v;
}

inline double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    size_t m = v.size() / 2;
    return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

}  // namespace th_bench
