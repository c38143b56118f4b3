// A child process started by a test or a benchmark: its stdout (and, when
// asked, its stdin) is a pipe to the parent, read line by line with a
// deadline. The child is SIGKILLed and reaped when the handle goes away,
// unless it was reaped before.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace th_support {

using Clock = std::chrono::steady_clock;

// Reads newline-terminated lines from a file descriptor.
class LineReader {
  public:
    enum Result { Line, End, TimedOut };
    explicit LineReader(int fd = -1) : fd_(fd) {}
    // Waits until deadline for the next line and stores it, without its
    // newline, in line. End: end of file, or reading failed (error() says why).
    Result read(Clock::time_point deadline, std::string &line);
    const std::string &error() const { return error_; }

  private:
    int fd_;
    std::string buffered_;
    std::string error_;
};

// Writes line + '\n' completely; false (errno set) when writing failed, e.g. EPIPE.
bool write_line(int fd, const std::string &line);

// Makes sure fds 0, 1 and 2 are open, so that pipes never get those numbers
// (a child's pipe ends are dup2()ed onto 0 and 1). Throws std::runtime_error.
void ensure_std_fds();

// How a process with this wait status ended: "exited with status 0",
// "was killed by signal 9 (Killed)".
std::string describe_exit(int status);

class Process {
  public:
    // Starts argv[0] (a path) with argv.
    explicit Process(const std::vector<std::string> &argv) : Process(argv[0], argv) {}
    // Starts `program` with argv (argv[0] is the name it sees). With
    // stdin_pipe, its stdin is a pipe too (send()). Throws std::runtime_error
    // when it cannot start.
    Process(const std::string &program, const std::vector<std::string> &argv, bool stdin_pipe = false);
    ~Process();
    Process(const Process &) = delete;
    Process &operator=(const Process &) = delete;

    // -1 once reaped.
    pid_t pid() const { return pid_; }
    // The next line of its output, or "" at end of file or when timeout_ms passes.
    std::string line(int timeout_ms = 60000);
    // Its output, for callers that tell end of file from a timeout.
    LineReader &output() { return output_; }
    // Writes a line to its stdin; false (errno set) when that failed.
    bool send(const std::string &line) { return write_line(to_child_, line); }
    // Waits up to timeout for it to exit: its wait status once it did.
    std::optional<int> reap(std::chrono::milliseconds timeout);
    // Waits up to timeout_ms for it to exit, then kills it: its exit code, or
    // -1 if it had to be killed or died of a signal.
    int wait(int timeout_ms = 10000);
    // SIGTERM, then wait().
    int stop(int timeout_ms = 10000);
    // CPU seconds (user + system) it has used so far.
    double cpu_seconds() const;

  private:
    pid_t pid_ = -1;
    int to_child_ = -1;
    int from_child_ = -1;
    LineReader output_;
};

}  // namespace th_support
