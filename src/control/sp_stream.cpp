#include "control/sp_stream.hpp"

#include <algorithm>

#include "common/log.hpp"

namespace th::sp {

const StreamScheme *stream_scheme(const std::string &url) {
    static const StreamScheme kSchemes[] = {
        {"ipc://", true, false, 0},   {"unix://", true, false, 0}, {"abstract://", true, true, 0},
        {"tcp://", false, false, 0},  {"tcp4://", false, false, 4}, {"tcp6://", false, false, 6},
    };
    for (const StreamScheme &s : kSchemes)
        if (url.rfind(s.prefix, 0) == 0) return &s;
    return nullptr;
}

bool stream_url(const std::string &url, bool *ipc) {
    const StreamScheme *s = stream_scheme(url);
    *ipc = s != nullptr && s->ipc;
    return s != nullptr;
}

std::string url_form_hint(const std::string &url) {
    // NNG 1.5's schemes; tls+tcp:// and wss:// need TLS settings this
    // library does not pass, so they are not offered.
    static const char *const kSchemes[] = {"tcp://", "tcp4://", "tcp6://", "ipc://", "abstract://", "inproc://",
                                           "ws://",  "ws4://",  "ws6://",  "wss://", "tls+tcp://"};
    for (const char *s : kSchemes)
        if (url.rfind(s, 0) == 0) return "";
    return " (a control URL is tcp://host:port, ipc:///path or ws://host:port/path)";
}

void greeting(Protocol p, uint8_t out[8]) {
    const uint8_t g[8] = {0x00, 'S', 'P', 0x00, static_cast<uint8_t>(p >> 8), static_cast<uint8_t>(p & 0xff), 0x00, 0x00};
    std::copy(g, g + 8, out);
}

bool greeted_by(const uint8_t theirs[8], Protocol peer, const std::string &url, const char *what, bool *warned) {
    uint8_t expected[8];
    greeting(peer, expected);
    if (std::equal(theirs, theirs + 8, expected)) return true;
    if (!*warned)
        TH_LOG(Warn, "what listens at ", url, " is not a tensorhub server's ", what, " (it did not greet as NNG ",
               peer == kPub ? "PUB" : peer == kRep ? "REP" : "SP", ")");
    *warned = true;
    return false;
}

std::string with_port(const std::string &url, int port) {
    size_t scheme = url.find("://");
    if (scheme == std::string::npos) return url;
    size_t authority = scheme + 3, end = std::min(url.find('/', authority), url.size());
    size_t colon = url.rfind(':', end);
    if (colon == std::string::npos || colon < authority || url.find(']', colon) < end) return url;
    return url.substr(0, colon + 1) + std::to_string(port) + url.substr(end);
}

std::vector<uint8_t> frame(bool ipc, const std::vector<uint8_t> &head, const std::vector<uint8_t> &body) {
    std::vector<uint8_t> frame;
    frame.reserve(9 + head.size() + body.size());
    if (ipc) frame.push_back(1);
    uint64_t len = head.size() + body.size();
    for (int i = 7; i >= 0; --i) frame.push_back(static_cast<uint8_t>(len >> (8 * i)));
    frame.insert(frame.end(), head.begin(), head.end());
    frame.insert(frame.end(), body.begin(), body.end());
    return frame;
}

}  // namespace th::sp
