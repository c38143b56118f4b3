#include "bench_proc.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>

namespace th_bench {

using th_support::LineReader;

Child::Child(std::string name, const std::vector<std::string> &args) : name_(std::move(name)) {
    try {
        process_ = std::make_unique<th_support::Process>("/proc/self/exe", args, /*stdin_pipe=*/true);
    } catch (const std::exception &e) {
        fail("cannot start the ", name_, " process: ", e.what());
    }
}

Child::~Child() = default;

void Child::send(const std::string &line) {
    if (!process_->send(line)) fail("writing to ", name_, ": ", std::strerror(errno));
}

std::vector<std::string> Child::call(const std::string &command, Millis timeout) {
    send(command);
    std::string line;
    LineReader &out = process_->output();
    auto got = out.read(Clock::now() + timeout, line);
    if (got == LineReader::TimedOut) fail("timed out waiting for ", name_, " to answer '", command, "'");
    if (got == LineReader::End) {
        if (!out.error().empty()) fail("reading from ", name_, ": ", out.error());
        std::optional<int> status = process_->reap(Millis(2000));
        fail(name_, " ", status ? th_support::describe_exit(*status) : "closed its pipe", " while running '", command,
             "'");
    }
    if (line.rfind("error ", 0) == 0) fail(name_, ": ", line.substr(6));
    auto words = split(line);
    if (words.empty() || words[0] != "ok") fail(name_, " sent an unexpected reply: '", line, "'");
    words.erase(words.begin());
    return words;
}

void Child::finish(Millis timeout) {
    send("quit");
    std::optional<int> status = process_->reap(timeout);
    if (!status) fail(name_, " did not exit within ", timeout.count(), " ms of being told to quit");
    if (*status != 0) fail(name_, " ", th_support::describe_exit(*status));
}

int serve(const std::string &name, const std::map<std::string, Handler> &handlers, Millis idle_limit) {
    // Die with the parent, even if it is killed before it can clean up.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    // Replies own the real stdout; anything else printed (a library, UCX)
    // goes to stderr rather than into the protocol.
    int reply_fd = dup(1);
    if (reply_fd < 0 || dup2(2, 1) < 0) {
        std::fprintf(stderr, "%s: cannot set up its reply pipe: %s\n", name.c_str(), std::strerror(errno));
        return 1;
    }
    LineReader commands(0);
    try {
        for (;;) {
            std::string line;
            auto got = commands.read(Clock::now() + idle_limit, line);
            if (got == LineReader::TimedOut) fail("timed out waiting for the next command from the parent");
            if (got == LineReader::End && !commands.error().empty())
                fail("reading from the parent: ", commands.error());
            if (got == LineReader::End) fail("the parent closed the command pipe");
            auto words = split(line);
            if (words.empty()) continue;
            if (words[0] == "quit") return 0;
            std::string reply;
            try {
                auto it = handlers.find(words[0]);
                if (it == handlers.end()) fail("unknown command '", words[0], "'");
                std::vector<std::string> args(words.begin() + 1, words.end());
                std::string out = it->second(args);
                reply = out.empty() ? "ok" : "ok " + out;
            } catch (const std::exception &e) {
                reply = std::string("error ") + e.what();
                std::replace(reply.begin(), reply.end(), '\n', ' ');
            }
            if (!th_support::write_line(reply_fd, reply)) fail("writing to the parent: ", std::strerror(errno));
        }
    } catch (const std::exception &e) {
        std::fprintf(stderr, "tensorhub-fetch-bench %s: %s\n", name.c_str(), e.what());
        return 1;
    }
}

}  // namespace th_bench
