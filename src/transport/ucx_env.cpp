#include "transport/ucx_env.hpp"

#include <cstdlib>
#include <string>

namespace th {

namespace {

// The UCX loaded, as UCP_VERSION(major, minor).
unsigned loaded_version() {
    unsigned major = 0, minor = 0, release = 0;
    ucp_get_version(&major, &minor, &release);
    return UCP_VERSION(major, minor);
}

// The first UCX whose tcp connects without blocking between live processes
// as reliably as blocking ones (ucx_env.hpp).
constexpr unsigned kTcpConnNbSince = UCP_VERSION(1, 14);

}  // namespace

bool ucx_one_sided_reads() {
#if UCP_API_VERSION >= UCP_VERSION(1, 19)
    return loaded_version() >= UCP_VERSION(1, 19);
#else
    return false;
#endif
}

bool ucx_tcp_connects_without_blocking() { return loaded_version() >= kTcpConnNbSince; }

bool ucx_aborts_on_a_failed_wireup_reply() { return loaded_version() < UCP_VERSION(1, 14); }

bool apply_ucx_defaults(ucp_config_t *config, const char **refused) {
    struct Setting {
        const char *name;  // without the UCX_ prefix
        const char *value;
        bool applies;  // with the UCX loaded
        // Only where UCX has the transport (its module loaded): a setting
        // UCX does not know is skipped, not an error.
        bool if_known = false;
    };
    bool one_sided = ucx_one_sided_reads();
    const Setting settings[] = {
        {"TCP_TX_SEG_SIZE", "64K", true},
        {"TCP_RX_SEG_SIZE", "256K", true},
        {"TCP_CONN_NB", "y", ucx_tcp_connects_without_blocking()},
        // An endpoint whose other side was closed (one that gave up on this
        // process, say) is found out within a second, not 20: else a new
        // endpoint to that process can be matched with it and its reads
        // vanish (ucx_env.hpp).
        {"KEEPALIVE_INTERVAL", "1s", !ucx_aborts_on_a_failed_wireup_reply()},
        {"POSIX_ERROR_HANDLING", "y", one_sided},
        {"SYSV_ERROR_HANDLING", "y", one_sided},
        {"CMA_MEMORY_INVALIDATE", "y", one_sided},
        {"MEMTYPE_REG_WHOLE_ALLOC_TYPES", "", one_sided},
        {"CUDA_IPC_ENABLE_GET_ZCOPY", "y", one_sided, true},
    };
    for (const Setting &s : settings) {
        std::string var = std::string("UCX_") + s.name;
        if (!s.applies || std::getenv(var.c_str()) != nullptr) continue;
        if (!one_sided) {
            // UCX before 1.19 takes transport settings from the environment
            // only (ucp_config_modify accepts them, then warns on stdout that
            // they are invalid and ignores them).
            setenv(var.c_str(), s.value, /*overwrite=*/0);
            continue;
        }
        ucs_status_t st = ucp_config_modify(config, s.name, s.value);
        // UCX answers a name it does not know with "invalid parameter".
        if ((st == UCS_ERR_INVALID_PARAM || st == UCS_ERR_NO_ELEM) && s.if_known) continue;
        if (st != UCS_OK) {
            *refused = s.name;
            return false;
        }
    }
    return true;
}

}  // namespace th
