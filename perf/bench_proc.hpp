// The benchmark's processes: the parent starts each role as a copy of itself
// (/proc/self/exe) and drives it with one-line commands over a pipe pair (the
// child's stdin and stdout). A reply is "ok [words...]" or "error <message>".
// Every wait has a deadline, and a child that is not finished cleanly is killed.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench_util.hpp"

namespace th_bench {

using Millis = std::chrono::milliseconds;

// Reads newline-terminated lines from a file descriptor.
class LineReader {
  public:
    explicit LineReader(int fd = -1) : fd_(fd) {}
    // The next line, without its newline; nullopt at end of file. Throws
    // BenchError when the deadline passes first.
    std::optional<std::string> read(Clock::time_point deadline, const std::string &from);

  private:
    int fd_;
    std::string buffered_;
};

// Writes line + '\n' completely; throws BenchError on failure (e.g. EPIPE).
void write_line(int fd, const std::string &line, const std::string &to);

// Makes sure fds 0, 1 and 2 are open, so that pipes never get those numbers
// (the child side dup2()s its pipe ends onto 0 and 1).
void ensure_std_fds();

// Parent side: one child process.
class Child {
  public:
    // Starts /proc/self/exe with args (args[0] is the name it sees as argv[0]).
    Child(std::string name, const std::vector<std::string> &args);
    ~Child();  // kills the process unless finish() succeeded
    Child(const Child &) = delete;
    Child &operator=(const Child &) = delete;

    // Sends a command and returns the words of the reply after "ok".
    std::vector<std::string> call(const std::string &command, Millis timeout);
    // Tells the child to quit and waits for it to exit with status 0.
    void finish(Millis timeout);
    const std::string &name() const { return name_; }
    pid_t pid() const { return pid_; }
    // CPU seconds (user + system) the process has used so far.
    double cpu_seconds() const;

  private:
    // Waits up to timeout for the process to exit; describes how it ended.
    std::optional<std::string> reap(Millis timeout);

    std::string name_;
    pid_t pid_ = -1;
    int to_child_ = -1;
    int from_child_fd_ = -1;
    LineReader from_child_;
};

// Child side: runs the command loop on stdin/stdout until "quit". A handler
// gets the command's arguments and returns the reply words; an exception
// becomes an "error" reply. Returns the process exit code.
using Handler = std::function<std::string(const std::vector<std::string> &args)>;
int serve(const std::string &name, const std::map<std::string, Handler> &handlers, Millis idle_limit);

}  // namespace th_bench
