// The threads of this process as Linux lists them: id, name (comm) and
// timer slack, for tests of what the library's threads are and do.
#pragma once

#include <dirent.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace th_support {

struct ThreadInfo {
    int tid;
    std::string name;
    unsigned long timer_slack_ns;  // the thread's own (/proc/<tid>/timerslack_ns)
};

inline std::vector<ThreadInfo> threads_of_this_process() {
    std::vector<ThreadInfo> out;
    DIR *d = opendir("/proc/self/task");
    if (d == nullptr) return out;
    while (dirent *e = readdir(d)) {
        if (e->d_name[0] == '.') continue;
        ThreadInfo t{std::atoi(e->d_name), {}, 0};
        std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
        // Ended between the listing and now (a short-lived thread): not one
        // of this process's threads any more.
        if (!std::getline(comm, t.name)) continue;
        std::ifstream(std::string("/proc/") + e->d_name + "/timerslack_ns") >> t.timer_slack_ns;
        out.push_back(std::move(t));
    }
    closedir(d);
    return out;
}

}  // namespace th_support
