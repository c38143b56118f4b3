// A small command-line parser shared by the tensorhub programs:
// positional words and "--name value" / "--flag" options.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace th_support {

class Args {
  public:
    // flags: option names that take no value. Throws std::runtime_error on an
    // option missing its value.
    Args(int argc, char **argv, const std::set<std::string> &flags = {});

    const std::vector<std::string> &positional() const { return positional_; }
    bool has(const std::string &name) const { return options_.count(name) != 0; }
    std::string get(const std::string &name, const std::string &fallback = "") const;
    uint64_t get_u64(const std::string &name, uint64_t fallback) const;
    double get_double(const std::string &name, double fallback) const;
    // Options given that are not in known; for "unknown option" errors.
    std::vector<std::string> unknown(const std::set<std::string> &known) const;

  private:
    std::vector<std::string> positional_;
    std::map<std::string, std::string> options_;
};

// Human-readable byte count: "128.0 MiB".
std::string human_bytes(double bytes);

}  // namespace th_support
