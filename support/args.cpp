#include "args.hpp"

#include <cstdio>
#include <map>
#include <stdexcept>

namespace th_support {

Args::Args(int argc, char **argv, const std::set<std::string> &flags) {
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a.rfind("--", 0) != 0 || a.size() == 2) {
            positional_.push_back(a);
            continue;
        }
        std::string name = a.substr(2);
        size_t eq = name.find('=');
        if (eq != std::string::npos) {
            options_[name.substr(0, eq)] = name.substr(eq + 1);
        } else if (flags.count(name)) {
            options_[name] = std::string("1");  // a moved string: GCC 12 warns wrongly on assigning "1"
        } else {
            if (i + 1 >= argc) throw std::runtime_error("option --" + name + " needs a value");
            options_[name] = argv[++i];
        }
    }
}

std::string Args::get(const std::string &name, const std::string &fallback) const {
    auto it = options_.find(name);
    return it == options_.end() ? fallback : it->second;
}

namespace {

// parse(text, &used) as std::stoull and std::stod take it; the whole value must be the number.
template <typename T, typename Parse>
T number(const std::map<std::string, std::string> &options, const std::string &name, T fallback, Parse parse) {
    auto it = options.find(name);
    if (it == options.end()) return fallback;
    size_t used = 0;
    T v = parse(it->second, &used);
    if (used != it->second.size()) throw std::runtime_error("option --" + name + " expects a number");
    return v;
}

}  // namespace

uint64_t Args::get_u64(const std::string &name, uint64_t fallback) const {
    return number<uint64_t>(options_, name, fallback,
                            [](const std::string &t, size_t *used) { return std::stoull(t, used); });
}

double Args::get_double(const std::string &name, double fallback) const {
    return number<double>(options_, name, fallback,
                          [](const std::string &t, size_t *used) { return std::stod(t, used); });
}

std::vector<std::string> Args::unknown(const std::set<std::string> &known) const {
    std::vector<std::string> out;
    for (auto &[k, v] : options_)
        if (!known.count(k)) out.push_back(k);
    return out;
}

std::string human_bytes(double bytes) {
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f %s", bytes, units[u]);
    return buf;
}

}  // namespace th_support
