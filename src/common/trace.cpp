#include "common/trace.hpp"

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <string>
#include <unistd.h>

#include "common/log.hpp"

namespace th::trace {

namespace {

struct Sink {
    std::mutex mu;
    FILE *file = nullptr;

    Sink() {
        const char *dir = std::getenv("TENSORHUB_TRACE_DIR");
        if (dir == nullptr || *dir == '\0') return;
        std::string path = std::string(dir) + "/trace-" + std::to_string(getpid()) + ".tsv";
        file = std::fopen(path.c_str(), "a");
        if (file == nullptr) {
            TH_LOG(Warn, "TENSORHUB_TRACE_DIR: cannot open ", path, "; tracing off");
            return;
        }
        std::setvbuf(file, nullptr, _IOFBF, 1 << 20);
    }
    ~Sink() {
        if (file != nullptr) std::fclose(file);
    }
};

Sink &sink() {
    static Sink s;
    return s;
}

}  // namespace

bool on() {
    static const bool enabled = sink().file != nullptr;
    return enabled;
}

void event(const char *what, uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
    if (!on()) return;
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t ns = uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
    Sink &s = sink();
    std::lock_guard lk(s.mu);
    std::fprintf(s.file, "%llu\t%s\t%llu\t%llu\t%llu\t%llu\n", static_cast<unsigned long long>(ns), what,
                 static_cast<unsigned long long>(a), static_cast<unsigned long long>(b),
                 static_cast<unsigned long long>(c), static_cast<unsigned long long>(d));
}

void flush() {
    if (!on()) return;
    Sink &s = sink();
    std::lock_guard lk(s.mu);
    std::fflush(s.file);
}

}  // namespace th::trace
