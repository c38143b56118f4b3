#include "transport/ucx_env.hpp"

#include <cstdlib>
#include <mutex>

#include <ucp/api/ucp.h>

namespace th {

bool ucx_one_sided_reads() {
#if UCP_API_VERSION >= UCP_VERSION(1, 19)
    unsigned major = 0, minor = 0, release = 0;
    ucp_get_version(&major, &minor, &release);
    return UCP_VERSION(major, minor) >= UCP_VERSION(1, 19);
#else
    return false;
#endif
}

void apply_ucx_defaults() {
    static std::once_flag once;
    std::call_once(once, [] {
        setenv("UCX_TCP_TX_SEG_SIZE", "64K", /*overwrite=*/0);
        setenv("UCX_TCP_RX_SEG_SIZE", "256K", 0);
        // Ours, not the user's: no warning when a lane leaves one unused.
        setenv("UCX_WARN_UNUSED_ENV_VARS", "n", 0);
        if (ucx_one_sided_reads()) {
            setenv("UCX_POSIX_ERROR_HANDLING", "y", 0);
            setenv("UCX_SYSV_ERROR_HANDLING", "y", 0);
            setenv("UCX_CMA_MEMORY_INVALIDATE", "y", 0);
        }
    });
}

}  // namespace th
