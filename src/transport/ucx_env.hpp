// The UCX settings tensorhub relies on, applied to each context it creates
// (ucp_config_modify, so that nothing leaks into the process environment;
// UCX before 1.19 reads transport settings from the environment only, so
// there they are set in it), each only when the user has not set it in the
// environment.
#pragma once

#include <ucp/api/ucp.h>

namespace th {

// TCP_TX_SEG_SIZE=64K, TCP_RX_SEG_SIZE=256K: about twice the throughput over
// tcp (loopback ~1.3 -> ~2.5 GB/s), and an answer of a read piece fits one
// receive segment. With UCX >= 1.14, TCP_CONN_NB=y: tcp connects without
// blocking. A blocking connect that fails at once (the peer's process is gone,
// its host refuses) leaves UCX (1.13 to 1.22 at least) with an endpoint it has
// already scheduled for destruction when it had taken over a connection the
// peer had opened first: the endpoint UCP holds is freed under it, its error
// callback never called, and the process crashes later on it (tcp_ep.c,
// uct_tcp_ep_connect -> uct_tcp_ep_handle_io_err -> reconnect ->
// uct_tcp_ep_set_failed before the endpoint can send). Without blocking, the
// failure arrives through the connection's progress, on an endpoint that can
// report it, and the endpoint fails as any other does
// (Transport.AnEndpointToAWorkerThatDiedJustAfterConnectingFails: a crash
// every time with 1.14, 1.16, 1.18 and 1.22 connecting blocking, a pass
// without). Nor does a connect to a host that does not answer hold the
// worker's lock, and so every read of the process, for the kernel's SYN
// retries (over two minutes;
// Transport.AHostThatDoesNotAnswerHoldsUpNoOtherRead). Not with 1.13, whose
// non-blocking connects failed endpoints between live processes under
// AddressSanitizer (6 runs of the unit tests in 26; none of 8 blocking): there
// UCX's default stays, and its crash.
//
// With UCX >= 1.19 also POSIX_ERROR_HANDLING=y, SYSV_ERROR_HANDLING=y and
// CMA_MEMORY_INVALIDATE=y: shared memory and cma then accept endpoints with
// peer error handling, so processes on one host read each other over cma
// instead of tcp loopback; and MEMTYPE_REG_WHOLE_ALLOC_TYPES= (empty): a CUDA
// buffer is registered as given, not as the whole allocation around it.
// Finding that allocation made device registrations fail now and then with UCX
// 1.22 on an H200 ("failed to insert region [0x0..0x0]"; the same tests pass
// without it). Where UCX has cuda_ipc, CUDA_IPC_ENABLE_GET_ZCOPY=y: UCX's
// "auto" turned one-sided GETs over cuda_ipc off on an H200, and device reads
// then went through the holder's CPU at ~0.7 GB/s instead of ~530 GB/s
// (measured with tensorhub-fetch-bench's cuda lane).
//
// With UCX >= 1.14, KEEPALIVE_INTERVAL=1s (UCX's default is 20 s). A process
// that gives up on a peer (no progress) closes its endpoints without telling
// it; the peer keeps the endpoints UCX made for those connections, and UCX
// pairs the next endpoint the peer makes to that process with one of them
// (endpoints to a worker address are matched by creation order). Reads on it
// reached nothing: a reader stalled for its whole chunk timeout on a live
// holder that had earlier given up on it
// (WaitingReads.AWorkerThatGaveUpOnAnotherCanBeReadByIt hangs with 20 s;
// over tcp with UCX 1.22). A keepalive round finds such an endpoint out: it
// fails, and is no longer paired with new ones. Not with 1.13, which aborts
// when an endpoint fails at the wrong moment (below).
// Returns false with the name of the setting UCX refused in *refused.
bool apply_ucx_defaults(ucp_config_t *config, const char **refused);

// The UCX in use keeps zero-copy GET protocols under peer error handling
// (>= 1.19; 1.16-1.18 fall back to a software GET the holder answers), and
// this build can ask an endpoint which transports it uses.
bool ucx_one_sided_reads();

// The UCX in use connects over tcp without blocking (TCP_CONN_NB above).
bool ucx_tcp_connects_without_blocking();

// The UCX in use aborts on an assertion (ucp_request.c, "got REP message";
// relaxed in 1.14 by UCX's pull request 8175) when an endpoint fails while
// its reply to a peer's connection request is still queued: a peer that
// connects to a worker and goes away before the reply is sent takes that
// worker's process down (UcxWorker::flush_endpoints).
bool ucx_aborts_on_a_failed_wireup_reply();

}  // namespace th
