// UCX reads its transport settings from the environment only. These are the
// ones tensorhub relies on, set once per process before the first context,
// each only when the user has not set it.
#pragma once

namespace th {

// UCX_TCP_TX_SEG_SIZE=64K, UCX_TCP_RX_SEG_SIZE=256K: about twice the
// throughput over tcp (loopback ~1.3 -> ~2.5 GB/s), and an answer of a read
// piece fits one receive segment. With UCX >= 1.19 also
// UCX_POSIX_ERROR_HANDLING=y, UCX_SYSV_ERROR_HANDLING=y and
// UCX_CMA_MEMORY_INVALIDATE=y: shared memory and cma then accept endpoints
// with peer error handling, so processes on one host read each other over
// cma instead of tcp loopback.
void apply_ucx_defaults();

// The UCX in use keeps zero-copy GET protocols under peer error handling
// (>= 1.19; 1.16-1.18 fall back to a software GET the holder answers), and
// this build can ask an endpoint which transports it uses.
bool ucx_one_sided_reads();

}  // namespace th
