// Child processes for integration tests: started with a pipe on stdout, read
// line by line with a deadline, killed when the handle goes away.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

extern char **environ;

class Proc {
  public:
    explicit Proc(const std::vector<std::string> &argv) {
        int fds[2];
        if (pipe(fds) != 0) throw std::runtime_error("pipe");
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
        posix_spawn_file_actions_addclose(&fa, fds[0]);
        std::vector<char *> args;
        for (auto &a : argv) args.push_back(const_cast<char *>(a.c_str()));
        args.push_back(nullptr);
        if (posix_spawn(&pid_, argv[0].c_str(), &fa, nullptr, args.data(), environ) != 0)
            throw std::runtime_error("cannot start " + argv[0]);
        posix_spawn_file_actions_destroy(&fa);
        close(fds[1]);
        fd_ = fds[0];
    }
    ~Proc() {
        if (pid_ > 0) {
            kill(pid_, SIGKILL);
            waitpid(pid_, nullptr, 0);
        }
        if (fd_ >= 0) close(fd_);
    }
    Proc(const Proc &) = delete;
    Proc &operator=(const Proc &) = delete;

    // The next line of output, or "" on EOF or when timeout_ms passes.
    std::string line(int timeout_ms = 60000) {
        auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
        for (;;) {
            size_t nl = buf_.find('\n');
            if (nl != std::string::npos) {
                std::string l = buf_.substr(0, nl);
                buf_.erase(0, nl + 1);
                return l;
            }
            int left = static_cast<int>(
                std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now()).count());
            if (left <= 0) return "";
            pollfd p{fd_, POLLIN, 0};
            if (poll(&p, 1, left) <= 0) continue;
            char tmp[4096];
            ssize_t n = read(fd_, tmp, sizeof tmp);
            if (n <= 0) return "";
            buf_.append(tmp, static_cast<size_t>(n));
        }
    }
    // Sends SIGTERM and returns the exit code (-1 if it had to be killed).
    int stop(int timeout_ms = 10000) {
        kill(pid_, SIGTERM);
        return wait(timeout_ms);
    }
    int wait(int timeout_ms = 10000) {
        auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
        int st = 0;
        while (waitpid(pid_, &st, WNOHANG) == 0) {
            if (std::chrono::steady_clock::now() > end) {
                kill(pid_, SIGKILL);
                waitpid(pid_, &st, 0);
                pid_ = -1;
                return -1;
            }
            usleep(2000);
        }
        pid_ = -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    }
    pid_t pid() const { return pid_; }

  private:
    pid_t pid_ = -1;
    int fd_ = -1;
    std::string buf_;
};
