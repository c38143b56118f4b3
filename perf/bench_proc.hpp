// The benchmark's processes: the parent starts each role as a copy of itself
// (/proc/self/exe) and drives it with one-line commands over a pipe pair (the
// child's stdin and stdout). A reply is "ok [words...]" or "error <message>".
// Every wait has a deadline, and a child that is not finished cleanly is killed.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "process.hpp"

namespace th_bench {

using Millis = std::chrono::milliseconds;
using th_support::ensure_std_fds;

// Parent side: one child process.
class Child {
  public:
    // Starts /proc/self/exe with args (args[0] is the name it sees as argv[0]).
    Child(std::string name, const std::vector<std::string> &args);
    ~Child();  // kills the process unless finish() succeeded

    // Sends a command and returns the words of the reply after "ok".
    std::vector<std::string> call(const std::string &command, Millis timeout);
    // Tells the child to quit and waits for it to exit with status 0.
    void finish(Millis timeout);
    const std::string &name() const { return name_; }
    pid_t pid() const { return process_->pid(); }
    // CPU seconds (user + system) the process has used so far.
    double cpu_seconds() const { return process_->cpu_seconds(); }

  private:
    void send(const std::string &line);

    std::string name_;
    std::unique_ptr<th_support::Process> process_;
};

// Child side: runs the command loop on stdin/stdout until "quit". A handler
// gets the command's arguments and returns the reply words; an exception
// becomes an "error" reply. Returns the process exit code.
using Handler = std::function<std::string(const std::vector<std::string> &args)>;
int serve(const std::string &name, const std::map<std::string, Handler> &handlers, Millis idle_limit);

}  // namespace th_bench
