#include "wire/auth.hpp"

#include <mbedtls/md.h>

#include <cstdlib>

#include "common/error.hpp"

namespace th::wire {

namespace {

void mac(const std::string &token, const uint8_t *data, size_t size, uint8_t out[kMacBytes]) {
    const mbedtls_md_info_t *sha256 = mbedtls_md_info_from_type(MBEDTLS_MD_SHA256);
    if (mbedtls_md_hmac(sha256, reinterpret_cast<const unsigned char *>(token.data()), token.size(), data, size, out) != 0)
        fail(TH_ERR_INTERNAL, "HMAC-SHA256 failed");
}

// Constant time, so that timing does not reveal how much of a MAC matched.
bool equal(const uint8_t *a, const uint8_t *b, size_t n) {
    uint8_t diff = 0;
    for (size_t i = 0; i < n; ++i) diff |= a[i] ^ b[i];
    return diff == 0;
}

}  // namespace

Bytes seal(Bytes msg, const std::string &token) {
    if (token.empty()) return msg;
    uint8_t m[kMacBytes];
    mac(token, msg.data(), msg.size(), m);
    msg.insert(msg.end(), m, m + kMacBytes);
    return msg;
}

size_t open(const uint8_t *data, size_t size, const std::string &token) {
    if (token.empty()) return size;
    if (size < kMacBytes) fail(TH_ERR_AUTH, "message is not authenticated (no cluster token MAC)");
    uint8_t m[kMacBytes];
    mac(token, data, size - kMacBytes, m);
    if (!equal(m, data + size - kMacBytes, kMacBytes))
        fail(TH_ERR_AUTH, "message failed authentication (different cluster token?)");
    return size - kMacBytes;
}

std::string cluster_token(const char *configured) {
    if (configured != nullptr && *configured != '\0') return configured;
    const char *env = std::getenv("TENSORHUB_TOKEN");
    return env ? env : "";
}

}  // namespace th::wire
