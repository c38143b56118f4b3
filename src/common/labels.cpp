#include "common/labels.hpp"

#include "common/error.hpp"

namespace th {

Labels parse_labels(const std::string &text) {
    Labels out;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t comma = text.find(',', pos);
        if (comma == std::string::npos) comma = text.size();
        std::string item = text.substr(pos, comma - pos);
        pos = comma + 1;
        if (item.empty()) continue;
        size_t eq = item.find('=');
        if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
            fail(TH_ERR_INVALID_ARG, "label '", item, "' is not of the form key=value");
        out[item.substr(0, eq)] = item.substr(eq + 1);
    }
    return out;
}

std::string format_labels(const Labels &labels) {
    std::string out;
    for (const auto &[k, v] : labels) {
        if (!out.empty()) out += ',';
        out += k + '=' + v;
    }
    return out;
}

}  // namespace th
