#include "control/etcd.hpp"

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/log.hpp"
#include "control/http_client.hpp"

namespace th {

using json = nlohmann::json;

namespace etcd {

namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// The gateway writes 64-bit integers as JSON strings and leaves out zeros.
int64_t int_field(const json &j, const char *name) {
    auto it = j.find(name);
    if (it == j.end() || it->is_null()) return 0;
    if (it->is_number_integer()) return it->get<int64_t>();
    if (!it->is_string()) fail(TH_ERR_PROTOCOL, "etcd: field '", name, "' is not an integer");
    const std::string &s = it->get_ref<const std::string &>();
    size_t used = 0;
    int64_t v = 0;
    try {
        v = std::stoll(s, &used);
    } catch (const std::exception &) {
        used = 0;
    }
    if (used == 0 || used != s.size()) fail(TH_ERR_PROTOCOL, "etcd: field '", name, "' is not an integer: '", s, "'");
    return v;
}

json parse_object(const std::string &text) {
    json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) fail(TH_ERR_PROTOCOL, "etcd answered something that is not a JSON object");
    if (j.contains("error")) {
        std::string m = j.value("message", j["error"].is_string() ? j["error"].get<std::string>() : std::string("?"));
        fail(TH_ERR_PROTOCOL, "etcd refused the request: ", m);
    }
    return j;
}

}  // namespace

std::string base64_encode(const std::string &in) {
    std::string out;
    out.reserve((in.size() + 2) / 3 * 4);
    for (size_t i = 0; i < in.size(); i += 3) {
        uint32_t n = static_cast<uint8_t>(in[i]) << 16;
        if (i + 1 < in.size()) n |= static_cast<uint8_t>(in[i + 1]) << 8;
        if (i + 2 < in.size()) n |= static_cast<uint8_t>(in[i + 2]);
        out += kAlphabet[(n >> 18) & 63];
        out += kAlphabet[(n >> 12) & 63];
        out += i + 1 < in.size() ? kAlphabet[(n >> 6) & 63] : '=';
        out += i + 2 < in.size() ? kAlphabet[n & 63] : '=';
    }
    return out;
}

std::string base64_decode(const std::string &in) {
    if (in.size() % 4 != 0) fail(TH_ERR_PROTOCOL, "etcd: base64 text of ", in.size(), " characters");
    std::string out;
    out.reserve(in.size() / 4 * 3);
    for (size_t i = 0; i < in.size(); i += 4) {
        uint32_t n = 0;
        int pad = 0;
        for (size_t k = 0; k < 4; ++k) {
            char c = in[i + k];
            const char *p = c == '\0' ? nullptr : std::char_traits<char>::find(kAlphabet, 64, c);
            // '=' only at the end: the last one or two characters.
            if (c == '=' && i + 4 == in.size() && k >= 2 && (k == 3 || in[i + 3] == '=')) {
                ++pad;
                n <<= 6;
                continue;
            }
            if (p == nullptr || pad > 0) fail(TH_ERR_PROTOCOL, "etcd: bad base64 text");
            n = (n << 6) | static_cast<uint32_t>(p - kAlphabet);
        }
        out += static_cast<char>((n >> 16) & 255);
        if (pad < 2) out += static_cast<char>((n >> 8) & 255);
        if (pad < 1) out += static_cast<char>(n & 255);
    }
    return out;
}

std::vector<std::string> parse_endpoints(const std::string &endpoints) {
    std::vector<std::string> out;
    for (size_t pos = 0; pos <= endpoints.size();) {
        size_t comma = std::min(endpoints.find(',', pos), endpoints.size());
        std::string e = endpoints.substr(pos, comma - pos);
        pos = comma + 1;
        e.erase(0, e.find_first_not_of(" \t"));
        e.erase(e.find_last_not_of(" \t") + 1);
        if (e.empty()) continue;
        if (e.rfind("https://", 0) == 0) fail(TH_ERR_INVALID_ARG, "etcd endpoint '", e, "': https is not supported");
        if (e.rfind("http://", 0) != 0) e = "http://" + e;
        while (e.size() > 7 && e.back() == '/') e.pop_back();
        std::string host = e.substr(7);
        if (host.empty() || host.find('/') != std::string::npos || host.find(':') == std::string::npos)
            fail(TH_ERR_INVALID_ARG, "etcd endpoint '", e, "' is not host:port");
        out.push_back(e);
    }
    if (out.empty()) fail(TH_ERR_INVALID_ARG, "no etcd endpoint in '", endpoints, "'");
    return out;
}

std::optional<EtcdKv> parse_range_reply(const std::string &text) {
    json j = parse_object(text);
    auto kvs = j.find("kvs");
    if (kvs == j.end() || kvs->is_null()) return std::nullopt;
    if (!kvs->is_array()) fail(TH_ERR_PROTOCOL, "etcd: 'kvs' is not a list");
    if (kvs->empty()) return std::nullopt;
    const json &kv = (*kvs)[0];
    if (!kv.is_object()) fail(TH_ERR_PROTOCOL, "etcd: a key-value is not an object");
    EtcdKv out;
    auto v = kv.find("value");
    if (v != kv.end()) {
        if (!v->is_string()) fail(TH_ERR_PROTOCOL, "etcd: 'value' is not a string");
        out.value = base64_decode(v->get<std::string>());
    }
    out.mod_revision = int_field(kv, "mod_revision");
    out.lease = int_field(kv, "lease");
    return out;
}

bool parse_txn_reply(const std::string &text) {
    json j = parse_object(text);
    auto s = j.find("succeeded");
    if (s == j.end()) return false;  // the gateway leaves out false
    if (!s->is_boolean()) fail(TH_ERR_PROTOCOL, "etcd: 'succeeded' is not a boolean");
    return s->get<bool>();
}

int64_t parse_grant_reply(const std::string &text) {
    json j = parse_object(text);
    int64_t id = int_field(j, "ID");
    if (id == 0) fail(TH_ERR_PROTOCOL, "etcd granted no lease: ", j.value("error", std::string("no ID")));
    return id;
}

int64_t parse_keep_alive_reply(const std::string &text) {
    // A stream's reply: {"result": {...}} (one line per message).
    json j = parse_object(text.substr(0, text.find('\n')));
    auto r = j.find("result");
    if (r == j.end() || !r->is_object()) fail(TH_ERR_PROTOCOL, "etcd: keep-alive reply without a result");
    return int_field(*r, "TTL");
}

std::string leader_record_json(const LeaderRecord &r) { return json{{"url", r.url}, {"epoch", r.epoch}}.dump(); }

LeaderRecord parse_leader_record(const std::string &text) {
    json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("url") || !j["url"].is_string() || !j.contains("epoch") ||
        !j["epoch"].is_number_unsigned())
        fail(TH_ERR_PROTOCOL, "the leader record in etcd is not {\"url\": ..., \"epoch\": ...}");
    LeaderRecord r{j["url"].get<std::string>(), j["epoch"].get<uint64_t>()};
    if (r.url.empty()) fail(TH_ERR_PROTOCOL, "the leader record in etcd has an empty URL");
    return r;
}

}  // namespace etcd

EtcdClient::EtcdClient(const std::string &endpoints, uint32_t timeout_ms)
    : endpoints_(etcd::parse_endpoints(endpoints)), timeout_ms_(timeout_ms) {}

std::string EtcdClient::post(const std::string &path, const std::string &body) {
    std::string last;
    for (size_t tried = 0; tried < endpoints_.size(); ++tried) {
        size_t i = (next_.load() + tried) % endpoints_.size();
        try {
            std::string reply = http_post_json(endpoints_[i] + path, body, timeout_ms_);
            next_ = i;
            return reply;
        } catch (const Error &e) {
            if (e.code() != TH_ERR_UNAVAILABLE && e.code() != TH_ERR_TIMEOUT) throw;
            last = e.what();
        }
    }
    fail(TH_ERR_UNAVAILABLE, "no etcd endpoint answers (last: ", last, ")");
}

std::optional<EtcdKv> EtcdClient::get(const std::string &key) {
    return etcd::parse_range_reply(post("/v3/kv/range", json{{"key", etcd::base64_encode(key)}}.dump()));
}

bool EtcdClient::create_guarded(const std::string &key, const std::string &value, int64_t lease,
                                const std::string &guard_key, int64_t guard_revision, const std::string &guard_value) {
    using etcd::base64_encode;
    json compare = json::array({
        {{"key", base64_encode(key)}, {"target", "CREATE"}, {"result", "EQUAL"}, {"create_revision", "0"}},
        {{"key", base64_encode(guard_key)},
         {"target", "MOD"},
         {"result", "EQUAL"},
         {"mod_revision", std::to_string(guard_revision)}},
    });
    json success = json::array({
        {{"request_put", {{"key", base64_encode(key)}, {"value", base64_encode(value)}, {"lease", std::to_string(lease)}}}},
        {{"request_put", {{"key", base64_encode(guard_key)}, {"value", base64_encode(guard_value)}}}},
    });
    json txn = {{"compare", compare}, {"success", success}};
    return etcd::parse_txn_reply(post("/v3/kv/txn", txn.dump()));
}

void EtcdClient::delete_if_lease(const std::string &key, int64_t lease) {
    std::string k = etcd::base64_encode(key);
    json txn = {
        {"compare", json::array({{{"key", k}, {"target", "LEASE"}, {"result", "EQUAL"}, {"lease", std::to_string(lease)}}})},
        {"success", json::array({{{"request_delete_range", {{"key", k}}}}})},
    };
    etcd::parse_txn_reply(post("/v3/kv/txn", txn.dump()));
}

int64_t EtcdClient::grant(int64_t ttl_s) {
    return etcd::parse_grant_reply(post("/v3/lease/grant", json{{"TTL", std::to_string(ttl_s)}}.dump()));
}

int64_t EtcdClient::keep_alive(int64_t lease) {
    return etcd::parse_keep_alive_reply(post("/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}.dump()));
}

void EtcdClient::revoke(int64_t lease) {
    etcd::parse_txn_reply(post("/v3/lease/revoke", json{{"ID", std::to_string(lease)}}.dump()));
}

}  // namespace th
