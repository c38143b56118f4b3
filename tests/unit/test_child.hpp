// A disabled test of this binary run as a process of its own, for a test
// that needs a peer outside its process. The two leave files for each other
// in a fresh folder, whose path the child finds in an environment variable.
#pragma once

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

extern char **environ;

namespace th::test {

// Waits up to 20 s for path to exist.
inline bool wait_for_file(const std::string &path) {
    for (int i = 0; i < 2000; ++i) {
        if (access(path.c_str(), F_OK) == 0) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
}

// Writes text to path at once (through a rename): a reader never sees part of it.
inline void write_file(const std::string &path, const std::string &text) {
    { std::ofstream(path + ".tmp") << text; }
    std::rename((path + ".tmp").c_str(), path.c_str());
}

class TestChild {
  public:
    // Runs the disabled tests matching filter ("Suite.*"), with env_var set
    // to dir(); under prefix, a command that runs the rest of its arguments
    // (e.g. {"ip", "netns", "exec", "ns1"}), when one is given.
    TestChild(const std::string &filter, const std::string &env_var, const std::vector<std::string> &prefix = {}) {
        char tmpl[] = "/tmp/th-test-child-XXXXXX";
        if (mkdtemp(tmpl) == nullptr) return;
        dir_ = tmpl;
        std::string var = env_var + "=" + dir_;
        std::vector<char *> env;
        for (char **e = environ; *e != nullptr; ++e) env.push_back(*e);
        env.push_back(var.data());
        env.push_back(nullptr);
        char self[4096] = {};
        if (readlink("/proc/self/exe", self, sizeof self - 1) <= 0) return;
        std::vector<std::string> args = prefix;
        for (std::string a : {std::string(self), "--gtest_filter=" + filter, std::string("--gtest_also_run_disabled_tests")})
            args.push_back(a);
        std::vector<char *> argv;
        for (std::string &a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        if (posix_spawnp(&pid_, argv[0], nullptr, nullptr, argv.data(), env.data()) != 0) pid_ = -1;
    }
    // Tells the child to end ("done" in dir()), gives it 5 s, then kills it.
    ~TestChild() {
        if (dir_.empty()) return;
        if (pid_ > 0) {
            write_file(dir_ + "/done", "");
            int status = 0;
            for (int i = 0; i < 500 && waitpid(pid_, &status, WNOHANG) == 0; ++i)
                std::this_thread::sleep_for(std::chrono::milliseconds(10));
            ::kill(pid_, SIGKILL);
            waitpid(pid_, &status, WNOHANG);
        }
        std::system(("rm -rf " + dir_).c_str());
    }
    TestChild(const TestChild &) = delete;
    TestChild &operator=(const TestChild &) = delete;

    bool started() const { return pid_ > 0; }
    // Kills the child (SIGKILL) and waits until it is gone.
    void kill() {
        if (pid_ <= 0) return;
        ::kill(pid_, SIGKILL);
        int status = 0;
        waitpid(pid_, &status, 0);
        pid_ = -1;
    }
    const std::string &dir() const { return dir_; }

  private:
    std::string dir_;
    pid_t pid_ = -1;
};

}  // namespace th::test
