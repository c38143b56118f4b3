// Encoding and decoding of control messages (schemas/tensorhub.fbs).
// Every received buffer goes through verify() before any field is read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/layout.hpp"
#include "common/labels.hpp"
#include "tensorhub_generated.h"

namespace th::wire {

using namespace tensorhub::wire;
using Bytes = std::vector<uint8_t>;
using Builder = flatbuffers::FlatBufferBuilder;

constexpr uint16_t kProtocolVersion = static_cast<uint16_t>(Proto::Version);
// Cap on one control message, enforced by NNG and by the verifier.
constexpr size_t kMaxMessageBytes = 64u << 20;

// Checks buf is a well-formed Envelope of our protocol version; returns it or
// throws Error(TH_ERR_PROTOCOL) saying what is wrong.
const Envelope *verify(const uint8_t *data, size_t size);

// Header fields of an envelope.
struct Header {
    uint64_t request_id = 0;
    uint64_t worker_id = 0;
    uint64_t epoch = 0;
};

// Finishes builder with an Envelope around body and returns the bytes.
template <typename T>
Bytes finish(Builder &b, const Header &h, flatbuffers::Offset<T> body) {
    auto env = CreateEnvelope(b, kProtocolVersion, h.request_id, h.worker_id, h.epoch,
                              BodyTraits<T>::enum_value, body.Union());
    b.Finish(env);
    return Bytes(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
}

// What an ErrorReply asks of the client besides failing the call
// (schemas/tensorhub.fbs); set them by name: error_reply(h, code, msg, {.stale_server = true}).
struct ErrorFlags {
    bool unknown_worker = false;  // the server does not know the sender: say Hello again
    bool stale_server = false;    // the sender knows a newer epoch: fail over
    bool rebuilding = false;      // the server took over moments ago: ask again
    bool not_leader = false;      // etcd mode: this server does not lead; ask etcd who does
    bool left_server_alive = false;  // list mode: the server the worker left still answers
    bool probing = false;            // list mode: finding that out; say Hello again
    bool no_source_yet = false;      // a plan: live holders, but none this reader may read from now
};

// What an ErrorReply with no_source_yet carries: a reader may plan again
// shortly, when another holder may serve it.
class NoSourceYet : public Error {
  public:
    using Error::Error;
};

Bytes error_reply(const Header &h, int32_t code, const std::string &message, ErrorFlags flags = {});

// Conversions with range checks (throw Error(TH_ERR_PROTOCOL) on bad values).
flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<tensorhub::wire::TensorSpec>>> put_tensors(
    Builder &b, const std::vector<th::TensorSpec> &tensors);
std::vector<th::TensorSpec> get_tensors(const flatbuffers::Vector<flatbuffers::Offset<tensorhub::wire::TensorSpec>> *v);

flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<Label>>> put_labels(Builder &b, const Labels &labels);
Labels get_labels(const flatbuffers::Vector<flatbuffers::Offset<Label>> *v);

// Throws the Error an ErrorReply carries. Codes a peer sends are checked:
// an unknown one becomes TH_ERR_PROTOCOL.
[[noreturn]] void throw_reply_error(const ErrorReply &e, const char *context);

// A vector of 8-byte scalars read in place must be 8-byte aligned; the
// verifier does not check element alignment, and our own encoders always
// align them. Returns v, or throws Error(TH_ERR_PROTOCOL).
const flatbuffers::Vector<uint64_t> *aligned(const flatbuffers::Vector<uint64_t> *v, const char *what);
const flatbuffers::Vector<int64_t> *aligned(const flatbuffers::Vector<int64_t> *v, const char *what);

// A string field that must be present and non-empty.
std::string required(const flatbuffers::String *s, const char *what);

}  // namespace th::wire
