#include "wire/wire.hpp"

#include "common/error.hpp"

namespace th::wire {

const Envelope *verify(const uint8_t *data, size_t size) {
    if (data == nullptr || size < 8) fail(TH_ERR_PROTOCOL, "message too short (", size, " bytes)");
    if (size > kMaxMessageBytes) fail(TH_ERR_PROTOCOL, "message too large (", size, " bytes)");
    // Tight limits: our messages are at most a few levels deep.
    flatbuffers::Verifier v(data, size, /*max_depth=*/16, /*max_tables=*/4u << 20);
    if (!VerifyEnvelopeBuffer(v)) fail(TH_ERR_PROTOCOL, "message failed verification (", size, " bytes)");
    const Envelope *env = GetEnvelope(data);
    if (env->proto() != kProtocolVersion)
        fail(TH_ERR_PROTOCOL, "protocol version ", env->proto(), " not supported (this build speaks ",
             kProtocolVersion, ")");
    // A union type without its value passes the verifier: handlers would
    // then read through a null table.
    if (env->body_type() == Body::NONE || env->body() == nullptr) fail(TH_ERR_PROTOCOL, "message has no body");
    return env;
}

Bytes error_reply(const Header &h, int32_t code, const std::string &message, ErrorFlags flags) {
    Builder b(256);
    auto msg = b.CreateString(message);
    return finish(b, h, CreateErrorReply(b, code, msg, flags.unknown_worker, flags.stale_server, flags.rebuilding,
                                                flags.not_leader, flags.left_server_alive, flags.probing,
                                                flags.no_source_yet));
}

flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<tensorhub::wire::TensorSpec>>> put_tensors(
    Builder &b, const std::vector<th::TensorSpec> &tensors) {
    std::vector<flatbuffers::Offset<tensorhub::wire::TensorSpec>> out;
    out.reserve(tensors.size());
    for (const auto &t : tensors)
        out.push_back(CreateTensorSpec(b, b.CreateString(t.name), static_cast<uint8_t>(t.dtype),
                                       b.CreateVector(t.shape), t.nbytes));
    return b.CreateVector(out);
}

std::vector<th::TensorSpec> get_tensors(
    const flatbuffers::Vector<flatbuffers::Offset<tensorhub::wire::TensorSpec>> *v) {
    std::vector<th::TensorSpec> out;
    if (v == nullptr) return out;
    out.reserve(v->size());
    for (const auto *t : *v) {
        th::TensorSpec s;
        s.name = required(t->name(), "tensor name");
        if (!dtype_known(t->dtype())) fail(TH_ERR_PROTOCOL, "tensor '", s.name, "' has unknown dtype ", int(t->dtype()));
        s.dtype = static_cast<th_dtype>(t->dtype());
        if (const auto *shape = aligned(t->shape(), "tensor shape")) {
            if (shape->size() > TH_MAX_DIMS) fail(TH_ERR_PROTOCOL, "tensor '", s.name, "' has too many dims");
            s.shape.assign(shape->begin(), shape->end());
        }
        s.nbytes = t->nbytes();
        out.push_back(std::move(s));
    }
    return out;
}

flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<Label>>> put_labels(Builder &b, const Labels &labels) {
    std::vector<flatbuffers::Offset<Label>> out;
    for (const auto &[k, v] : labels) out.push_back(CreateLabel(b, b.CreateString(k), b.CreateString(v)));
    return b.CreateVector(out);
}

Labels get_labels(const flatbuffers::Vector<flatbuffers::Offset<Label>> *v) {
    Labels out;
    if (v == nullptr) return out;
    for (const auto *l : *v) out[required(l->key(), "label key")] = l->value() ? l->value()->str() : "";
    return out;
}

void throw_reply_error(const ErrorReply &e, const char *context) {
    int32_t code = e.code();
    std::string msg = e.message() ? e.message()->str() : str(context, ": server error without message");
    if (code >= 0 || code < kLowestStatus) throw Error(TH_ERR_PROTOCOL, str("unknown status ", code, ": ", msg));
    if (e.no_source_yet()) throw NoSourceYet(static_cast<th_status>(code), msg);
    throw Error(static_cast<th_status>(code), msg);
}

namespace {
template <typename V>
const V *check_aligned(const V *v, const char *what) {
    if (v != nullptr && v->size() > 0 && reinterpret_cast<uintptr_t>(v->data()) % 8 != 0)
        fail(TH_ERR_PROTOCOL, what, " is not 8-byte aligned");
    return v;
}
}  // namespace

const flatbuffers::Vector<uint64_t> *aligned(const flatbuffers::Vector<uint64_t> *v, const char *what) {
    return check_aligned(v, what);
}
const flatbuffers::Vector<int64_t> *aligned(const flatbuffers::Vector<int64_t> *v, const char *what) {
    return check_aligned(v, what);
}

std::string required(const flatbuffers::String *s, const char *what) {
    if (s == nullptr || s->size() == 0) fail(TH_ERR_PROTOCOL, what, " is missing");
    return s->str();
}

}  // namespace th::wire
