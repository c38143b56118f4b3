#include "process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char **environ;

namespace th_support {

namespace {

int millis_until(Clock::time_point deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return static_cast<int>(std::clamp<int64_t>(left, 0, 1000));
}

}  // namespace

LineReader::Result LineReader::read(Clock::time_point deadline, std::string &line) {
    for (;;) {
        size_t nl = buffered_.find('\n');
        if (nl != std::string::npos) {
            line = buffered_.substr(0, nl);
            buffered_.erase(0, nl + 1);
            return Line;
        }
        if (Clock::now() >= deadline) return TimedOut;
        pollfd pfd{fd_, POLLIN, 0};
        int r = poll(&pfd, 1, millis_until(deadline));
        if (r < 0 && errno != EINTR) {
            error_ = std::string("poll: ") + std::strerror(errno);
            return End;
        }
        if (r <= 0) continue;
        char chunk[4096];
        ssize_t n = ::read(fd_, chunk, sizeof chunk);
        if (n < 0 && errno != EINTR) {
            error_ = std::string("read: ") + std::strerror(errno);
            return End;
        }
        if (n == 0) return End;
        if (n > 0) buffered_.append(chunk, static_cast<size_t>(n));
    }
}

bool write_line(int fd, const std::string &line) {
    std::string data = line + '\n';
    size_t done = 0;
    while (done < data.size()) {
        ssize_t n = ::write(fd, data.data() + done, data.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return false;
        done += static_cast<size_t>(n);
    }
    return true;
}

void ensure_std_fds() {
    for (int fd = 0; fd <= 2; ++fd)
        if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDWR) < 0) throw std::runtime_error("cannot open /dev/null");
}

std::string describe_exit(int status) {
    std::ostringstream os;
    if (WIFEXITED(status))
        os << "exited with status " << WEXITSTATUS(status);
    else if (WIFSIGNALED(status))
        os << "was killed by signal " << WTERMSIG(status) << " (" << strsignal(WTERMSIG(status)) << ")";
    else
        os << "ended";
    return os.str();
}

Process::Process(const std::string &program, const std::vector<std::string> &argv, bool stdin_pipe) {
    // O_CLOEXEC: only the dup2()ed copies below reach this child, and no pipe
    // end leaks into a sibling (which would hide this child's exit from us).
    int out[2], in[2] = {-1, -1};
    if (pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    if (stdin_pipe && pipe2(in, O_CLOEXEC) != 0) {
        int e = errno;
        close(out[0]);
        close(out[1]);
        throw std::runtime_error(std::string("pipe: ") + std::strerror(e));
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (stdin_pipe) posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    std::vector<char *> args;
    for (const auto &a : argv) args.push_back(const_cast<char *>(a.c_str()));
    args.push_back(nullptr);
    int rc = posix_spawn(&pid_, program.c_str(), &fa, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    if (stdin_pipe) close(in[0]);
    if (rc != 0) {
        pid_ = -1;
        close(out[0]);
        if (stdin_pipe) close(in[1]);
        throw std::runtime_error("cannot start " + program + ": " + std::strerror(rc));
    }
    from_child_ = out[0];
    to_child_ = in[1];
    output_ = LineReader(from_child_);
}

Process::~Process() {
    if (pid_ > 0) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);  // SIGKILL cannot be ignored: this returns
    }
    if (to_child_ >= 0) close(to_child_);
    if (from_child_ >= 0) close(from_child_);
}

// UCX logs to stdout unless told otherwise ("[1795861217.178209] [host:2920
// :0] sock.c:325 UCX ERROR connect(...) failed"); Debian's UCX 1.13 does so
// when a peer's old address refuses a connection. Such a line is not the
// program's: it is skipped (and shown on stderr).
static bool ucx_log_line(const std::string &l) {
    return l.size() > 2 && l[0] == '[' && l.find("] [") != std::string::npos && l.find(" UCX ") != std::string::npos;
}

std::string Process::line(int timeout_ms) {
    auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
        std::string l;
        if (output_.read(deadline, l) != LineReader::Line) return "";
        if (!ucx_log_line(l)) return l;
        std::fprintf(stderr, "%s\n", l.c_str());
    }
}

std::optional<int> Process::reap(std::chrono::milliseconds timeout) {
    if (pid_ <= 0) throw std::runtime_error("the process was reaped already");
    auto deadline = Clock::now() + timeout;
    for (;;) {
        int status = 0;
        pid_t r = waitpid(pid_, &status, WNOHANG);
        if (r == pid_) {
            pid_ = -1;
            return status;
        }
        if (r < 0) throw std::runtime_error(std::string("waitpid: ") + std::strerror(errno));
        if (Clock::now() >= deadline) return std::nullopt;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
}

int Process::wait(int timeout_ms) {
    if (pid_ <= 0) return -1;  // reaped already
    std::optional<int> status = reap(std::chrono::milliseconds(timeout_ms));
    if (!status) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
        pid_ = -1;
        return -1;
    }
    return WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
}

int Process::stop(int timeout_ms) {
    if (pid_ <= 0) return -1;  // reaped already
    kill(pid_, SIGTERM);
    return wait(timeout_ms);
}

double Process::cpu_seconds() const {
    // /proc/PID/stat: fields 14 and 15 (utime, stime) in clock ticks, after
    // the command name in parentheses (which may hold spaces).
    std::ifstream in("/proc/" + std::to_string(pid_) + "/stat");
    std::string line;
    std::getline(in, line);
    size_t close = line.rfind(')');
    if (close == std::string::npos)
        throw std::runtime_error("cannot read the CPU time of process " + std::to_string(pid_));
    std::istringstream fields(line.substr(close + 2));
    std::string f;
    double ticks = 0;
    for (int i = 3; i <= 15 && fields >> f; ++i)
        if (i >= 14) ticks += std::stod(f);
    return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace th_support
