// Message authentication with a cluster token: when a token is set, every
// control message (request, reply, event) carries an HMAC-SHA256 of its bytes
// under that token, appended after the FlatBuffer. A peer without the token
// can neither be served nor serve: nothing it sends is read, and nothing it
// receives (rkeys included) can be trusted or forged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "wire/wire.hpp"

namespace th::wire {

constexpr size_t kMacBytes = 32;

// msg + MAC(token, msg); msg unchanged when token is empty.
Bytes seal(Bytes msg, const std::string &token);

// The message inside a sealed buffer (its size without the MAC). Throws
// Error(TH_ERR_AUTH) when the MAC is missing or wrong. With an empty token
// the buffer is returned whole.
size_t open(const uint8_t *data, size_t size, const std::string &token);

// The cluster token: `configured` when not empty, else $TENSORHUB_TOKEN.
std::string cluster_token(const char *configured);

}  // namespace th::wire
