// An environment variable set (or unset) for a scope, as it was afterwards.
// UCX reads its variables as a context is made, children inherit them.
#pragma once

#include <cstdlib>
#include <string>
#include <utility>

namespace th_support {

class ScopedEnv {
  public:
    // value nullptr: unset for the scope.
    ScopedEnv(std::string name, const char *value) : name_(std::move(name)) {
        const char *before = std::getenv(name_.c_str());
        had_ = before != nullptr;
        if (had_) before_ = before;
        if (value != nullptr)
            setenv(name_.c_str(), value, 1);
        else
            unsetenv(name_.c_str());
    }
    ~ScopedEnv() {
        if (had_)
            setenv(name_.c_str(), before_.c_str(), 1);
        else
            unsetenv(name_.c_str());
    }
    ScopedEnv(const ScopedEnv &) = delete;
    ScopedEnv &operator=(const ScopedEnv &) = delete;

  private:
    std::string name_;
    bool had_ = false;
    std::string before_;
};

}  // namespace th_support
