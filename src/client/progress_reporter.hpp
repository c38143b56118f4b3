// Tells the server how far a replica that is still filling has got, so that
// its status (and the live page) shows the fill level while a fetch runs. A
// thread of its own sends a Progress message when the replica's chunks_done
// (read from its control word) has grown, at most once per period: the fetch
// loop itself never waits on the server for it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "client/control_word.hpp"
#include "client/server_session.hpp"

namespace th {

class ProgressReporter {
  public:
    ProgressReporter(ServerSession &session, uint64_t replica_id, const ControlWord *word, uint32_t period_ms);
    ~ProgressReporter();  // stops and joins; sends nothing more
    ProgressReporter(const ProgressReporter &) = delete;
    ProgressReporter &operator=(const ProgressReporter &) = delete;

  private:
    void loop();
    ServerSession &session_;
    uint64_t replica_id_;
    const ControlWord *word_;
    uint32_t period_ms_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool stop_ = false;
    std::thread thread_;
};

}  // namespace th
