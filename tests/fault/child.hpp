// A child process of the fault driver: support/process.hpp's Process (stdout
// read line by line, SIGKILLed when the handle goes away) plus what fault runs
// need on top of it: stderr captured in a log file per process, a liveness
// check that does not reap (so Process still can), and a registry of running
// pids so that a driver stopped by a signal leaves no process behind.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "process.hpp"

namespace th_fault {

// Pids of the children still running. Plain atomics in a fixed array, because
// the signal handler that empties it may only do async-signal-safe things.
inline std::atomic<pid_t> g_live_children[1024];

inline void remember_child(pid_t pid) {
    for (auto &slot : g_live_children) {
        pid_t empty = 0;
        if (slot.compare_exchange_strong(empty, pid)) return;
    }
}

inline void forget_child(pid_t pid) {
    for (auto &slot : g_live_children) {
        pid_t expected = pid;
        if (slot.compare_exchange_strong(expected, 0)) return;
    }
}

// Async-signal-safe: for SIGINT/SIGTERM handlers of the driver.
inline void kill_all_children() {
    for (auto &slot : g_live_children)
        if (pid_t pid = slot.load()) kill(pid, SIGKILL);
}

// The argv that runs `binary args` with extra environment variables and its
// stderr appended to `log`. env and sh both exec, so the pid we get is the
// pid of the binary itself: signals reach it, not a wrapper.
inline std::vector<std::string> logged_command(const std::string &binary, const std::vector<std::string> &args,
                                               const std::vector<std::string> &env, const std::string &log) {
    std::vector<std::string> argv = {"/usr/bin/env"};
    argv.insert(argv.end(), env.begin(), env.end());
    argv.push_back("TH_FAULT_LOG=" + log);
    argv.insert(argv.end(), {"/bin/sh", "-c", "exec \"$@\" 2>>\"$TH_FAULT_LOG\"", "sh", binary});
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
}

class Child {
  public:
    Child(std::string name, const std::string &binary, const std::vector<std::string> &args,
          const std::vector<std::string> &env, std::string log)
        : name_(std::move(name)), log_(std::move(log)) {
        proc_ = std::make_unique<th_support::Process>(logged_command(binary, args, env, log_));
        remember_child(proc_->pid());
    }
    ~Child() {
        forget_child(proc_->pid());
        proc_.reset();  // SIGKILL (a stopped process dies too) and reap
    }
    Child(const Child &) = delete;
    Child &operator=(const Child &) = delete;

    const std::string &name() const { return name_; }
    const std::string &log() const { return log_; }
    pid_t pid() const { return proc_->pid(); }

    // The next stdout line that is a result ("ok ...", "error ...", "ready
    // ...", see kResultWords), or "" on EOF or timeout. Other lines (UCX
    // prints its own errors on stdout) are skipped. One thread at a time.
    std::string line(int timeout_ms) {
        auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
        for (;;) {
            auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now()).count();
            if (left <= 0) return "";
            std::string l = proc_->line(static_cast<int>(left));
            if (l.empty() || is_result(l)) return l;
        }
    }

    // nullopt while it runs, else how it ended ("exit 1", "signal 9").
    // WNOWAIT leaves the zombie for Process to reap.
    std::optional<std::string> ended() const {
        siginfo_t info{};
        if (waitid(P_PID, static_cast<id_t>(proc_->pid()), &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0)
            return std::nullopt;
        if (info.si_code == CLD_EXITED) return "exit " + std::to_string(info.si_status);
        return "signal " + std::to_string(info.si_status);
    }

    // Sends sig; a SIGKILL we sent marks the process as deliberately dead.
    void signal(int sig) {
        if (sig == SIGKILL) killed_ = true;
        kill(proc_->pid(), sig);
    }
    bool killed_by_fault() const { return killed_; }

    // The last `n` lines of its stderr log, indented, for violation reports.
    std::string log_tail(size_t n) const {
        std::ifstream in(log_);
        std::deque<std::string> lines;
        for (std::string l; std::getline(in, l);) {
            lines.push_back(l);
            if (lines.size() > n) lines.pop_front();
        }
        std::string out;
        for (auto &l : lines) out += "      | " + l + "\n";
        return out.empty() ? "      | (empty log)\n" : out;
    }

    // Whether its stderr log contains `text`.
    bool log_contains(const std::string &text) const {
        std::ifstream in(log_);
        for (std::string l; std::getline(in, l);)
            if (l.find(text) != std::string::npos) return true;
        return false;
    }
    size_t log_count(const std::string &text) const {
        std::ifstream in(log_);
        size_t n = 0;
        for (std::string l; std::getline(in, l);) n += l.find(text) != std::string::npos;
        return n;
    }

  private:
    static bool is_result(const std::string &l) {
        static const char *kResultWords[] = {"ok", "error", "corrupt", "mixed", "ready", "listening"};
        std::string first = l.substr(0, l.find(' '));
        for (const char *w : kResultWords)
            if (first == w) return true;
        return false;
    }

    std::string name_, log_;
    std::unique_ptr<th_support::Process> proc_;
    bool killed_ = false;
};

}  // namespace th_fault
