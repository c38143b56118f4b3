// Fuzz target: every decoder that reads what etcd (or whatever answers at
// its address) sends: the gateway's JSON replies, base64, the leader record.
// Malformed input must end in Error(TH_ERR_PROTOCOL), never a crash. The
// seed corpus (corpus/etcd) is replies recorded from etcd 3.4.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/error.hpp"
#include "control/etcd.hpp"

using namespace th;

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    setenv("TENSORHUB_LOG_LEVEL", "error", 0);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    std::string text(reinterpret_cast<const char *>(data), size);
    // Each decoder on its own: one rejecting the input must not hide another.
    auto each = [](auto f) {
        try {
            f();
        } catch (const Error &) {
            // Rejected with a message: what the caller does with bad input.
        }
    };
    each([&] {
        if (auto kv = etcd::parse_range_reply(text)) etcd::parse_leader_record(kv->value);
    });
    each([&] { etcd::parse_txn_reply(text); });
    each([&] { etcd::parse_grant_reply(text); });
    each([&] { etcd::parse_keep_alive_reply(text); });
    each([&] { etcd::parse_leader_record(text); });
    each([&] { etcd::base64_decode(text); });
    return 0;
}
