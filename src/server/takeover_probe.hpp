// List mode: before a server takes over from the server a failing-over
// worker left (Hello.left_url), it asks that server whether it still answers.
// The question is asked on a thread of its own, never in a request handler:
// handlers run on NNG's task threads, and handlers that each waited on
// another NNG operation could take every task thread and wait forever for a
// completion only a task thread can deliver. A Hello whose answer is not
// known yet is told to say Hello again (ErrorReply.probing).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace th {

class TakeoverProbe {
  public:
    // The epoch the server at url answers a Ping with within ms; throws if
    // it does not (control/ping.hpp).
    using Ping = std::function<uint64_t(const std::string &url, uint32_t ms)>;
    // An answer stands for this long after its probe ended: every worker
    // failing over at once hears the same one, and a server that comes back
    // or goes away is noticed by the next probe.
    static constexpr uint64_t kKeepMs = 1000;
    // The longest a Hello may ask a probe to wait (Hello.probe_ms).
    static constexpr uint32_t kMaxProbeMs = 2000;

    struct Answer {
        enum class State { Probing, Gone, Answers } state = State::Probing;
        uint64_t epoch = 0;  // Answers: the epoch the server answered with
        std::string why;     // Gone: why it did not answer
    };

    // now_ms: the clock answers are kept by.
    TakeoverProbe(Ping ping, std::function<uint64_t()> now_ms);
    // Waits for a probe in flight (at most kMaxProbeMs).
    ~TakeoverProbe();
    TakeoverProbe(const TakeoverProbe &) = delete;
    TakeoverProbe &operator=(const TakeoverProbe &) = delete;

    // Never blocks: the answer for url that still stands, else Probing (a
    // probe of at most probe_ms is started unless one is under way).
    Answer ask(const std::string &url, uint32_t probe_ms);

  private:
    static constexpr size_t kPruneAt = 64;  // entries kept before old answers are dropped
    struct Entry {
        bool running = false;
        uint32_t probe_ms = 0;
        uint64_t ended_ms = 0;
        Answer answer;
    };
    void run();

    const Ping ping_;
    const std::function<uint64_t()> now_ms_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::map<std::string, Entry> entries_;  // by URL
    std::deque<std::string> queue_;         // URLs waiting for a probe
    bool stop_ = false;
    std::thread thread_;
};

}  // namespace th
