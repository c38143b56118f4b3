// Fuzz target: every decoder the client runs on what a server sends it
// (replies and events). Malformed input must end in Error(TH_ERR_PROTOCOL)
// or a clean decode, never a crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "common/error.hpp"
#include "wire/replica_desc.hpp"
#include "wire/status_json.hpp"

using namespace th;
using namespace th::wire;

// Bad requests are logged at warn: quiet them, the fuzzer makes millions.
extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    setenv("TENSORHUB_LOG_LEVEL", "error", 0);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    try {
        const Envelope *env = verify(data, size);
        switch (env->body_type()) {
            case Body::PlanReply: {
                const PlanReply *p = env->body_as_PlanReply();
                Layout layout(get_tensors(p->tensors()), p->chunk_bytes());
                if (p->ranges())
                    for (const SourceRange *r : *p->ranges()) check_desc(get_desc(r->replica()), layout.tensors());
                break;
            }
            case Body::StatusReply: status_to_json(*env->body_as_StatusReply()); break;
            case Body::DescribeReply: describe_to_json("m", 0, *env->body_as_DescribeReply()); break;
            case Body::ErrorReply: throw_reply_error(*env->body_as_ErrorReply(), "fuzz");
            case Body::Event: {
                const Event *e = env->body_as_Event();
                if (e->model()) (void)e->model()->str();
                break;
            }
            default: break;
        }
    } catch (const Error &) {
        // Rejected with a message: what the client does with bad input.
    }
    return 0;
}
