#include <fstream>
#include <sstream>
#include "bench_proc.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

extern char **environ;

namespace th_bench {

namespace {

int millis_until(Clock::time_point deadline) {
    auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
    return static_cast<int>(std::clamp<int64_t>(left, 0, 1000));
}

std::string describe_exit(int status) {
    if (WIFEXITED(status)) return str("exited with status ", WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return str("was killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
    return "ended";
}

}  // namespace

std::optional<std::string> LineReader::read(Clock::time_point deadline, const std::string &from) {
    for (;;) {
        size_t nl = buffered_.find('\n');
        if (nl != std::string::npos) {
            std::string line = buffered_.substr(0, nl);
            buffered_.erase(0, nl + 1);
            return line;
        }
        if (Clock::now() >= deadline) fail("timed out waiting for ", from);
        pollfd pfd{fd_, POLLIN, 0};
        int r = poll(&pfd, 1, millis_until(deadline));
        if (r < 0 && errno != EINTR) fail("poll on the pipe from ", from, ": ", std::strerror(errno));
        if (r <= 0) continue;
        char chunk[4096];
        ssize_t n = ::read(fd_, chunk, sizeof chunk);
        if (n < 0 && errno != EINTR) fail("reading from ", from, ": ", std::strerror(errno));
        if (n == 0) return std::nullopt;
        if (n > 0) buffered_.append(chunk, static_cast<size_t>(n));
    }
}

void write_line(int fd, const std::string &line, const std::string &to) {
    std::string data = line + '\n';
    size_t done = 0;
    while (done < data.size()) {
        ssize_t n = ::write(fd, data.data() + done, data.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) fail("writing to ", to, ": ", std::strerror(errno));
        done += static_cast<size_t>(n);
    }
}

void ensure_std_fds() {
    for (int fd = 0; fd <= 2; ++fd)
        if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDWR) < 0) fail("cannot open /dev/null");
}

Child::Child(std::string name, const std::vector<std::string> &args) : name_(std::move(name)) {
    int commands[2], replies[2];
    // O_CLOEXEC: only the dup2()ed copies below reach this child, and no pipe
    // end leaks into a sibling (which would hide this child's exit from us).
    if (pipe2(commands, O_CLOEXEC) != 0 || pipe2(replies, O_CLOEXEC) != 0)
        fail("cannot create pipes for ", name_, ": ", std::strerror(errno));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, commands[0], 0);
    posix_spawn_file_actions_adddup2(&fa, replies[1], 1);
    std::vector<char *> argv;
    for (const auto &a : args) argv.push_back(const_cast<char *>(a.c_str()));
    argv.push_back(nullptr);
    int rc = posix_spawn(&pid_, "/proc/self/exe", &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    close(commands[0]);
    close(replies[1]);
    if (rc != 0) {
        close(commands[1]);
        close(replies[0]);
        fail("cannot start the ", name_, " process: ", std::strerror(rc));
    }
    to_child_ = commands[1];
    from_child_fd_ = replies[0];
    from_child_ = LineReader(from_child_fd_);
}

double Child::cpu_seconds() const {
    // /proc/PID/stat: fields 14 and 15 (utime, stime) in clock ticks, after
    // the command name in parentheses (which may hold spaces).
    std::ifstream in("/proc/" + std::to_string(pid_) + "/stat");
    std::string line;
    std::getline(in, line);
    size_t close = line.rfind(')');
    if (close == std::string::npos) fail("cannot read the CPU time of ", name_);
    std::istringstream fields(line.substr(close + 2));
    std::string f;
    double ticks = 0;
    for (int i = 3; i <= 15 && fields >> f; ++i)
        if (i >= 14) ticks += std::stod(f);
    return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

Child::~Child() {
    if (pid_ > 0) {
        kill(pid_, SIGKILL);
        int status = 0;
        waitpid(pid_, &status, 0);  // SIGKILL cannot be ignored: this returns
    }
    close(to_child_);
    close(from_child_fd_);
}

std::optional<std::string> Child::reap(Millis timeout) {
    auto deadline = Clock::now() + timeout;
    for (;;) {
        int status = 0;
        pid_t r = waitpid(pid_, &status, WNOHANG);
        if (r == pid_) {
            pid_ = -1;
            return describe_exit(status);
        }
        if (r < 0) fail("waitpid on ", name_, ": ", std::strerror(errno));
        if (Clock::now() >= deadline) return std::nullopt;
        std::this_thread::sleep_for(Millis(10));
    }
}

std::vector<std::string> Child::call(const std::string &command, Millis timeout) {
    write_line(to_child_, command, name_);
    auto line = from_child_.read(Clock::now() + timeout, str(name_, " to answer '", command, "'"));
    if (!line) {
        auto how = reap(Millis(2000));
        fail(name_, " ", how.value_or("closed its pipe"), " while running '", command, "'");
    }
    if (line->rfind("error ", 0) == 0) fail(name_, ": ", line->substr(6));
    auto words = split(*line);
    if (words.empty() || words[0] != "ok") fail(name_, " sent an unexpected reply: '", *line, "'");
    words.erase(words.begin());
    return words;
}

void Child::finish(Millis timeout) {
    write_line(to_child_, "quit", name_);
    auto how = reap(timeout);
    if (!how) fail(name_, " did not exit within ", timeout.count(), " ms of being told to quit");
    if (*how != describe_exit(0)) fail(name_, " ", *how);
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
            auto line = commands.read(Clock::now() + idle_limit, "the next command from the parent");
            if (!line) fail("the parent closed the command pipe");
            auto words = split(*line);
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
            write_line(reply_fd, reply, "the parent");
        }
    } catch (const std::exception &e) {
        std::fprintf(stderr, "tensorhub-fetch-bench %s: %s\n", name.c_str(), e.what());
        return 1;
    }
}

}  // namespace th_bench
