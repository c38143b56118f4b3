/*
 * tensorhub: Reference-Oriented Storage for LLM weights.
 *
 * This header is the whole public interface of libtensorhub. Anything that is
 * not declared here is not API and may change at any time.
 *
 * Conventions (they hold for every function unless its comment says otherwise):
 *  - Every function returning th_status returns TH_OK (0) on success or a
 *    negative TH_ERR_* code. On failure, th_last_error() on the same thread
 *    returns a message that names the problem.
 *  - Out-parameters come first. Strings passed in are copied; the library keeps
 *    no pointer to them after the call returns.
 *  - What the library allocates, the library frees (th_free, *_destroy).
 *  - *_destroy(NULL) and th_replica_release(NULL) are no-ops.
 *  - Config structs start with struct_size. Always initialise them with their
 *    *_config_init(&cfg, sizeof cfg) function, then set the fields you need.
 *    Fields are only ever appended, and the library reads and writes only the
 *    fields a struct of the size you pass has, so a program built against an
 *    older header keeps working with a newer library.
 *  - Every blocking call has a deadline: it returns TH_ERR_TIMEOUT rather than
 *    waiting forever.
 */
#ifndef TENSORHUB_TENSORHUB_H
#define TENSORHUB_TENSORHUB_H

#include <stddef.h>
#include <stdint.h>

#define TH_VERSION_MAJOR 0
#define TH_VERSION_MINOR 1
#define TH_VERSION_PATCH 0
#define TH_VERSION_NUMBER \
    (TH_VERSION_MAJOR * 10000 + TH_VERSION_MINOR * 100 + TH_VERSION_PATCH)

#if defined(_WIN32)
#define TH_API
#elif defined(TH_BUILDING_LIBRARY)
#define TH_API __attribute__((visibility("default")))
#else
#define TH_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------- */
/* Status codes and errors                                                    */
/* ------------------------------------------------------------------------- */

/* Stable numbers: never renumbered, only appended. */
typedef enum th_status {
    TH_OK = 0,
    TH_ERR_INVALID_ARG = -1,     /* bad argument: null, out of range, malformed */
    TH_ERR_NOT_FOUND = -2,       /* unknown model, version, shard or tensor */
    TH_ERR_NOT_COMMITTED = -3,   /* version exists but not all shards are published */
    TH_ERR_LAYOUT_MISMATCH = -4, /* buffers do not match the published layout */
    TH_ERR_CONFLICT = -5,        /* publish disagrees with what is already published */
    TH_ERR_TIMEOUT = -6,         /* the deadline passed */
    TH_ERR_UNAVAILABLE = -7,     /* server unreachable or not accepting this worker,
                                    or no live holder of the data */
    TH_ERR_TRANSPORT = -8,       /* data-plane (UCX) failure */
    TH_ERR_PROTOCOL = -9,        /* malformed or unexpected message */
    TH_ERR_NO_MEMORY = -10,      /* allocation failed */
    TH_ERR_CLOSED = -11,         /* the handle is shutting down */
    TH_ERR_UNSUPPORTED = -12,    /* not built in (e.g. CUDA memory without CUDA) */
    TH_ERR_INTERNAL = -13,       /* a bug in tensorhub: please report it */
    TH_ERR_RETAINED = -14,       /* the last complete copy of a required version
                                    cannot be given up (retention policy "fail") */
    TH_ERR_AUTH = -15,           /* a message failed authentication: the peers do
                                    not share the same cluster token */
    TH_ERR_CANCELED = -16        /* the caller canceled it (th_cancel_signal) */
} th_status;

/* A static, human-readable name for a status code. Never NULL. Thread-safe. */
TH_API const char *th_status_str(th_status status);

/* The message describing the last failure of a tensorhub call on the calling
 * thread. Owned by the library; valid until the next tensorhub call on this
 * thread. Never NULL (empty string if no error was recorded). */
TH_API const char *th_last_error(void);

/* Frees memory the library returned to the caller (e.g. th_status_json output).
 * NULL is a no-op. Thread-safe. */
TH_API void th_free(void *ptr);

/* The library version as "MAJOR.MINOR.PATCH". Static string. Thread-safe. */
TH_API const char *th_version(void);

/* TH_VERSION_NUMBER of the library actually loaded. Thread-safe. */
TH_API uint32_t th_version_number(void);

/* ------------------------------------------------------------------------- */
/* Logging                                                                    */
/* ------------------------------------------------------------------------- */

/* How much the library says. Lines go to stderr unless a handler is set. */
typedef enum th_log_level {
    TH_LOG_ERROR = 0,
    TH_LOG_WARN = 1,  /* the default, or $TENSORHUB_LOG_LEVEL (error, warn, info, debug) */
    TH_LOG_INFO = 2,
    TH_LOG_DEBUG = 3
} th_log_level;

/* One log line, without a trailing newline and without a timestamp. Called
 * on whichever library thread logs, possibly on several at once; it must
 * not call into tensorhub. */
typedef void (*th_log_fn)(th_log_level level, const char *message, void *user_data);

/* Sends the process's log lines to fn instead of stderr (NULL: back to
 * stderr): the library's own, and UCX's warnings and errors, which are
 * logged at TH_LOG_INFO as "ucx: ..." (the library reports every failure
 * that matters itself) unless $UCX_LOG_LEVEL is set, in which case UCX
 * prints its own. Returns once no call to the previous handler is still
 * running: from then on it is never called again. Thread-safe. */
TH_API void th_set_log_handler(th_log_fn fn, void *user_data);

/* Lines above level are not logged. TH_ERR_INVALID_ARG for an unknown
 * level. Thread-safe. */
TH_API th_status th_set_log_level(th_log_level level);

/* The level in force. Thread-safe. */
TH_API th_log_level th_get_log_level(void);

/* ------------------------------------------------------------------------- */
/* Tensors                                                                    */
/* ------------------------------------------------------------------------- */

/* Element types. Stable numbers. */
typedef enum th_dtype {
    TH_DTYPE_UINT8 = 0,
    TH_DTYPE_INT8 = 1,
    TH_DTYPE_INT16 = 2,
    TH_DTYPE_INT32 = 3,
    TH_DTYPE_INT64 = 4,
    TH_DTYPE_FLOAT16 = 5,
    TH_DTYPE_BFLOAT16 = 6,
    TH_DTYPE_FLOAT32 = 7,
    TH_DTYPE_FLOAT64 = 8,
    TH_DTYPE_BOOL = 9,
    TH_DTYPE_FLOAT8_E4M3 = 10,
    TH_DTYPE_FLOAT8_E5M2 = 11,
    TH_DTYPE_UINT16 = 12,
    TH_DTYPE_UINT32 = 13,
    TH_DTYPE_UINT64 = 14
} th_dtype;

/* Size in bytes of one element of dtype, or 0 for an unknown dtype. */
TH_API size_t th_dtype_size(th_dtype dtype);

/* Where a buffer lives. */
typedef enum th_mem_kind {
    TH_MEM_HOST = 0,
    TH_MEM_CUDA = 1 /* needs a library built with TH_WITH_CUDA */
} th_mem_kind;

#define TH_MAX_DIMS 8

/* One named tensor in caller memory. This struct is frozen: its layout never
 * changes (a future version would add a new type).
 * nbytes must equal th_dtype_size(dtype) * product(shape). The name is copied;
 * the buffer at data is only referenced (see th_publish and th_fetch). */
typedef struct th_tensor {
    const char *name;
    th_dtype dtype;
    uint32_t ndim;               /* 0..TH_MAX_DIMS */
    int64_t shape[TH_MAX_DIMS];  /* the first ndim entries are used */
    void *data;
    uint64_t nbytes;
    th_mem_kind mem_kind;
    int32_t device;              /* CUDA device ordinal; ignored for host */
} th_tensor;

/* ------------------------------------------------------------------------- */
/* Server (the ROS metadata service)                                          */
/* ------------------------------------------------------------------------- */

typedef struct th_server th_server;

/* Defaults. Each TH_DEFAULT_* is what the *_config_init function puts in the
 * field of that name, and what the library, its programs and the bindings
 * use; languages that cannot see macros read them back from *_config_init. */
#define TH_DEFAULT_LISTEN_URL "tcp://127.0.0.1:0"
#define TH_DEFAULT_LEASE_MS 10000
#define TH_DEFAULT_ETCD_PREFIX "/tensorhub"
#define TH_DEFAULT_ETCD_LEASE_MS 3000
#define TH_DEFAULT_MAX_READERS_PER_SOURCE 2
#define TH_DEFAULT_STRIPES 0

typedef struct th_server_config {
    size_t struct_size;     /* set by th_server_config_init */
    const char *listen_url; /* NNG URL, e.g. "tcp://127.0.0.1:0" (port 0: any free port).
                               Default TH_DEFAULT_LISTEN_URL. */
    uint32_t lease_ms;      /* a worker silent for this long loses its replicas.
                               Default TH_DEFAULT_LEASE_MS. */
    uint32_t max_readers_per_source; /* fan-out cap per source while other sources
                                        exist. Default TH_DEFAULT_MAX_READERS_PER_SOURCE. */
    const char *token;      /* cluster token: when set (or $TENSORHUB_TOKEN is), every
                               message must carry an HMAC-SHA256 under it. Default NULL. */
    const char *metrics_url; /* when set, serve HTTP at this URL, e.g. "http://0.0.0.0:9090"
                                (port 0: any): Prometheus metrics at GET <url>/metrics, a
                                live page at <url>/ and the status document it polls (the
                                JSON of th_status_json) at <url>/api/status. Default NULL. */
    uint32_t standby;       /* nonzero: this server waits to take over from another.
                               Until workers fail over to it, and for one lease after,
                               it cannot tell "unknown" from "not re-declared yet", so
                               such answers tell clients to ask again (within their
                               timeouts) instead of failing. Default 0. */
    /* High availability on etcd (leave NULL for a server of its own). Several
       servers started with the same etcd_endpoints and etcd_prefix campaign for
       leadership; only the leader serves, the others answer "not the leader"
       until etcd elects them. Clients use server_url "etcd://<endpoints><prefix>"
       to find and follow the leader. See docs/reliability.md. */
    const char *etcd_endpoints; /* "host:port[,host:port...]" of etcd's client URLs
                                   (plain HTTP). Default NULL: no etcd. */
    const char *etcd_prefix;    /* the keys this cluster uses in etcd.
                                   Default TH_DEFAULT_ETCD_PREFIX. */
    uint32_t etcd_lease_ms;     /* the leader's etcd lease, rounded up to whole
                                   seconds, at least 2 s: a dead leader is replaced
                                   within about this long. A leader cut off from
                                   etcd stops serving a quarter of it earlier.
                                   Default TH_DEFAULT_ETCD_LEASE_MS. */
    const char *advertise_url;  /* the URL clients reach this server at, published
                                   in etcd. Default NULL: the bound URL, which must
                                   then not be a wildcard address (0.0.0.0). */
    uint32_t stripes;           /* readers that serve others read a shard in this
                                   many stripes, each relayed along a tree of its
                                   own, so that N readers ready at once are about
                                   log N hops from the publisher instead of a chain
                                   of N. A stripe flows at 1/stripes of a link, so
                                   each hop costs stripes times more: trees pay off
                                   from a few dozen readers on. 1: chains; 2-11:
                                   that many (fewer for shards of few chunks);
                                   0: 8 for a shard published while 24 workers or
                                   more are registered, else chains.
                                   Default TH_DEFAULT_STRIPES (0). */
} th_server_config;

/* Fills cfg (a struct of `size` bytes: pass sizeof *cfg) with defaults and
 * sets cfg->struct_size. Must be called before th_server_create. */
TH_API void th_server_config_init(th_server_config *cfg, size_t size);

/* Starts a server in this process, serving on its own threads until destroyed.
 * *out is set on success. Thread-safe. */
TH_API th_status th_server_create(th_server **out, const th_server_config *cfg);

/* The URL clients connect to, with the real port when listen_url used port 0.
 * Owned by the server; valid until th_server_destroy. */
TH_API const char *th_server_url(const th_server *server);

/* The URL of the server's /metrics endpoint with the real port, or "" when
 * metrics_url was not set. Owned by the server; valid until th_server_destroy. */
TH_API const char *th_server_metrics_url(const th_server *server);

/* Stops serving and frees the server. Clients see TH_ERR_UNAVAILABLE afterwards.
 * Must not be called concurrently with other calls on the same server. */
TH_API void th_server_destroy(th_server *server);

/* ------------------------------------------------------------------------- */
/* Client                                                                     */
/* ------------------------------------------------------------------------- */

typedef struct th_client th_client;

/* What a client does when a replica it is about to mutate or release is the
 * last complete copy of a version that is still required (the newest committed
 * one, a pinned one, or one a reader is fetching). */
typedef enum th_retention {
    TH_RETAIN_SPILL = 0, /* copy the bytes into library-owned host memory and
                            serve that copy until the version is no longer required */
    TH_RETAIN_WAIT = 1,  /* wait (up to mutation_wait_ms) for a filling replica to
                            complete; spill if none completes in time */
    TH_RETAIN_FAIL = 2   /* refuse with TH_ERR_RETAINED */
} th_retention;

#define TH_DEFAULT_TIMEOUT_MS 10000
#define TH_DEFAULT_HEARTBEAT_MS 1000
#define TH_DEFAULT_CHUNK_TIMEOUT_MS 5000
#define TH_DEFAULT_MAX_INFLIGHT 8
#define TH_DEFAULT_RETENTION TH_RETAIN_SPILL
#define TH_DEFAULT_MUTATION_WAIT_MS 5000
#define TH_DEFAULT_SPILL_POOL_BYTES 0 /* no limit */
#define TH_DEFAULT_SPILL_AHEAD 0
#define TH_DEFAULT_COPY_THREADS 2
#define TH_MAX_COPY_THREADS 16

typedef struct th_client_config {
    size_t struct_size;
    const char *server_url;  /* required, e.g. "tcp://10.0.0.1:7070"; a comma-separated
                                list fails over along it; "etcd://h1:2379,h2:2379/tensorhub"
                                follows the leader etcd names under that prefix
                                (th_server_config.etcd_endpoints) */
    const char *worker_name; /* default: "<hostname>-<pid>" */
    const char *labels;      /* topology, "dc=eu,rack=r7,host=node12,gpu=0"; default: host=<hostname> */
    uint32_t timeout_ms;     /* deadline of control calls. Default TH_DEFAULT_TIMEOUT_MS. */
    uint32_t heartbeat_ms;   /* heartbeat period. Default TH_DEFAULT_HEARTBEAT_MS. */
    uint32_t chunk_timeout_ms; /* a chunk read with no completion for this long fails
                                  its source. Default TH_DEFAULT_CHUNK_TIMEOUT_MS. */
    uint32_t max_inflight;   /* chunk reads in flight per fetch (per stripe of a
                                striped fetch), at most. Default
                                TH_DEFAULT_MAX_INFLIGHT. Per source the window follows
                                read latency. */
    th_retention retention;  /* default TH_DEFAULT_RETENTION */
    uint32_t mutation_wait_ms; /* how long begin-mutation waits for reads in flight
                                  on the replica to drain. Default TH_DEFAULT_MUTATION_WAIT_MS. */
    const char *token;       /* cluster token (see th_server_config.token); NULL:
                                $TENSORHUB_TOKEN if set. Copied; never logged. */
    uint64_t spill_pool_bytes; /* host memory the library may hold for owned copies
                                  (TH_RETAIN_SPILL, TH_RETAIN_WAIT), 0: no limit.
                                  Each publish prepares, on a thread of the
                                  library, a faulted-in and registered buffer of
                                  the replica's size that the next spill copies
                                  into; buffers are reused across versions. A spill
                                  that does not fit fails with TH_ERR_NO_MEMORY.
                                  Default TH_DEFAULT_SPILL_POOL_BYTES. */
    uint32_t spill_ahead;      /* 1: each publish also starts, on a thread of the
                                  library, the copy a spill of the replica would
                                  make (TH_RETAIN_SPILL, TH_RETAIN_WAIT), into the
                                  pool: a begin-mutation that must spill then only
                                  declares it, or waits for the rest of it. A
                                  trainer that does something else between publish
                                  and mutation (the next step's forward and
                                  backward) then does not wait for the copy. The
                                  copy is dropped when the replica is given up
                                  without a spill. 0: copy when a spill is needed.
                                  Default TH_DEFAULT_SPILL_AHEAD. */
    uint32_t copy_threads;     /* threads that post one-sided reads into host
                                  memory (1 to TH_MAX_COPY_THREADS): the
                                  progress thread, and copy_threads - 1 more
                                  UCX workers with a thread each, made when the
                                  client first reads a holder one-sided; a
                                  chunk read goes to the thread with the fewest
                                  reads outstanding (so one read at a time
                                  stays on one thread). On
                                  one host (cma) the thread that posts a read
                                  copies it, so one thread reads at one core's
                                  copy rate. 1: the progress thread alone.
                                  Device memory and active-message reads (tcp)
                                  stay on the progress thread. Default
                                  TH_DEFAULT_COPY_THREADS. */
} th_client_config;

/* Fills cfg (pass sizeof *cfg as size) with defaults. Must be called before
 * th_client_create. */
TH_API void th_client_config_init(th_client_config *cfg, size_t size);

/* Creates a client: opens its UCX worker and progress thread and registers with
 * the server (fails with TH_ERR_UNAVAILABLE if the server cannot be reached
 * within timeout_ms). A client is thread-safe: all calls taking a th_client may
 * be made from any thread, concurrently. */
TH_API th_status th_client_create(th_client **out, const th_client_config *cfg);

/* Withdraws every replica the client still holds, disconnects and frees it.
 * Replica handles obtained from this client stay valid only to be passed to
 * th_replica_release (which then just frees them). Must not race with other
 * calls on the same client. A leaving client never fails over: with no server
 * answering it waits for at most one call's attempt (timeout_ms, halved when
 * it has servers to fail over to), a heartbeat in flight and a 1 s goodbye,
 * and the server forgets it with its lease. */
TH_API void th_client_destroy(th_client *client);

/* The worker id the server knows this client by (stable for its lifetime). */
TH_API uint64_t th_client_worker_id(const th_client *client);

/* ------------------------------------------------------------------------- */
/* Replicas: publish and release                                              */
/* ------------------------------------------------------------------------- */

/* A version held in this process's memory and served to others. */
typedef struct th_replica th_replica;

/* A summary of one th_fetch or th_publish, for logs and experiment trackers.
 * An out-struct: initialise it with th_sync_stats_init(&s, sizeof s) and pass
 * its address in th_fetch_config.stats or th_publish_config.stats; the call
 * fills it (only the fields a struct of its struct_size has) when it returns
 * TH_OK. Fields are only ever appended. */
typedef struct th_sync_stats {
    size_t struct_size;
    uint64_t version;            /* the version fetched or published */
    uint64_t bytes;              /* bytes fetched; for publish, bytes declared */
    double seconds;              /* wall time of the call */
    double gbps;                 /* bytes / seconds / 1e9 for a fetch; 0 for publish
                                    (nothing is moved) */
    uint32_t sources;            /* distinct holders bytes came from (0 for publish) */
    uint32_t replans;            /* plans asked for after the first one: a source
                                    failed, changed or stalled */
    uint32_t failed_sources;     /* sources dropped during the fetch */
    uint32_t chunks;             /* chunks fetched (publish: chunks declared) */
    uint64_t bytes_from_publisher; /* of bytes, read from a publisher's replica */
    uint64_t bytes_from_replicas;  /* of bytes, read from readers' replicas or spilled copies */
    uint32_t checksum_mismatches;  /* chunks that did not match the version's checksums:
                                      read again from another source, whose worker
                                      was reported (see th_fetch_config.verify) */
    uint64_t bytes_one_sided;      /* of bytes, read with one-sided GETs (RDMA, cma,
                                      cuda_ipc): no CPU of the holder touched them.
                                      The rest the holder's progress thread sent
                                      (tcp, or a UCX before 1.19; see README,
                                      "Transports"). 0 for publish */
    uint64_t bytes_waited;         /* of bytes, asked for from a reader's replica
                                      before it held them and sent by its holder
                                      the moment it did (waiting reads: the
                                      active-message path, a chain of readers
                                      fetching together). 0 for publish */
    uint64_t bytes_kept;           /* of bytes, read from a source whose replica
                                      changed (its holder began a mutation or
                                      released it) and confirmed after the reader
                                      saw the change: its holder had let them
                                      finish before the bytes could change
                                      (guarded reads: the active-message path).
                                      Elsewhere such bytes are read again. Few:
                                      a quick answer is confirmed as it lands.
                                      0 for publish */
    double server_seconds;         /* of seconds, the time the call waited for the
                                      metadata server's replies: for a fetch the
                                      plan before its first read, plans it could
                                      not read without, reports of failed sources
                                      and the end-of-fetch report (plans asked
                                      while reads went on are not counted); for
                                      publish, the declaration. A fetch's fixed
                                      cost: a round trip each, whatever the size */
} th_sync_stats;

/* Zeroes stats (pass sizeof *stats as size) and sets stats->struct_size. */
TH_API void th_sync_stats_init(th_sync_stats *stats, size_t size);

/* Pass as th_fetch_config.version to fetch the newest committed version. */
#define TH_LATEST UINT64_MAX

#define TH_DEFAULT_NUM_SHARDS 1
#define TH_DEFAULT_CHUNK_BYTES 4194304 /* 4 MiB */
#define TH_DEFAULT_CHECKSUMS 1

typedef struct th_publish_config {
    size_t struct_size;
    const char *model;    /* required, 1..255 bytes */
    uint64_t version;     /* chosen by the publisher, strictly increasing per model */
    uint32_t shard;       /* 0 <= shard < num_shards */
    uint32_t num_shards;  /* default TH_DEFAULT_NUM_SHARDS */
    uint64_t chunk_bytes; /* unit of progress, checksums and reads (a read may cover
                             several on fast lanes). Default TH_DEFAULT_CHUNK_BYTES;
                             must agree across shards. Readers that relay to each
                             other lag one chunk's time on the link per hop: about
                             2 ms of the slowest link keeps that small (4 MiB is
                             0.17 ms at 25 GB/s; at 1 gbit 256 KiB is 2.2 ms) */
    th_sync_stats *stats; /* if not NULL, filled on success (see th_sync_stats).
                             Default NULL. */
    uint32_t checksums;   /* nonzero: compute a checksum of every chunk (XXH3-64 of
                             its 4 KiB leaves' XXH3-64s) and declare them with the
                             version, for readers to check (th_fetch_config.verify).
                             One pass over the bytes at publish, on several threads
                             for large host shards and on the GPU for CUDA memory.
                             Default TH_DEFAULT_CHECKSUMS. */
} th_publish_config;

TH_API void th_publish_config_init(th_publish_config *cfg, size_t size);

/* Declares that this process holds (cfg->model, cfg->version, cfg->shard) in the
 * n tensors given. Nothing is copied: the buffers are registered with the data
 * plane (registration is cached, so publishing a later version from the same
 * buffers registers nothing new) and served to readers from then on.
 * The version becomes visible to readers when every shard is published with
 * agreeing metadata. The caller must keep the buffers alive and unchanged until
 * it releases the replica. *out receives the replica handle.
 * Errors: TH_ERR_INVALID_ARG, TH_ERR_CONFLICT (same model/version/shard already
 * published with different metadata, or a version not newer than the latest
 * committed one), TH_ERR_UNAVAILABLE, TH_ERR_TIMEOUT. */
TH_API th_status th_publish(th_client *client, const th_publish_config *cfg,
                            const th_tensor *tensors, size_t n, th_replica **out);

/* The version the replica holds. */
TH_API uint64_t th_replica_version(const th_replica *replica);

/* 1 once this client withdrew the replica because its bytes no longer match
 * the checksums its version was published with: a reader reported chunks of
 * it, and checking its own copy at a heartbeat this client found them changed
 * (the buffers were written without th_replica_begin_mutation, or the memory
 * is damaged). No reader is routed to it again, and its bytes are not that
 * version: a fetched replica's buffers should be fetched again. 0 otherwise,
 * and for NULL. Release it as usual. */
TH_API int th_replica_withdrawn(const th_replica *replica);

/* Withdraws the replica and frees the handle: the server stops routing reads
 * to it, and its control word's generation changes first, so a reader still
 * reading it discards what it read and re-reads from another holder. If it is
 * the last complete copy of a required version, the client's retention policy
 * applies first (see th_retention). After it returns, the caller may overwrite
 * the buffers. NULL is a no-op. Returns the status of telling the server; the
 * handle is freed either way, except on TH_ERR_RETAINED (retention policy
 * "fail"), where nothing changed and the handle stays valid. */
TH_API th_status th_replica_release(th_replica *replica);

/* Prepares to overwrite the replica's buffers (an optimizer step, loading the
 * next version in place): the server stops routing new reads to it; if it is
 * the last complete copy of a required version, the client's retention policy
 * applies (spill into an owned copy, wait for another replica, or fail with
 * TH_ERR_RETAINED); then it waits up to mutation_wait_ms for reads in flight
 * to drain, and marks the buffers as changing (readers that still read them
 * discard what they read and re-read elsewhere). After TH_OK the caller may
 * overwrite the buffers; th_replica_release completes the mutation. Publishing
 * the next version from the same buffers reuses their registration.
 * Thread-safe with respect to other replicas; not to be called twice. */
TH_API th_status th_replica_begin_mutation(th_replica *replica);

/* Keeps (model, version) required until th_unpin: its holders spill rather
 * than lose it. Pins held by a client end with it. */
TH_API th_status th_pin(th_client *client, const char *model, uint64_t version);
TH_API th_status th_unpin(th_client *client, const char *model, uint64_t version);

/* ------------------------------------------------------------------------- */
/* Cancellation                                                               */
/* ------------------------------------------------------------------------- */

/* A flag that ends the operations it is given to (th_fetch_config.cancel,
 * th_wait_for_version_cancelable) with TH_ERR_CANCELED once it is signalled: for a reader that shuts down, is
 * preempted, or no longer wants the version it is fetching. One token may be
 * given to several operations at once; it stays signalled (make a new one for
 * the next operation). */
typedef struct th_cancel th_cancel;

TH_API th_status th_cancel_create(th_cancel **out);
/* A token that is signalled when it is, or when parent is (parent may be
 * NULL: then th_cancel_create): for one operation among the several a token
 * ends, say a fetch whose progress callback decided to stop it, while the
 * caller's token still ends them all. Signalling it leaves parent alone.
 * Either may be destroyed first (a parent destroyed unsignalled never
 * signals it). */
TH_API th_status th_cancel_create_linked(const th_cancel *parent, th_cancel **out);
/* Signals it. Thread-safe, idempotent, never blocks. */
TH_API void th_cancel_signal(th_cancel *cancel);
/* 1 once it, or a token it is linked to, was signalled, else 0 (0 for NULL). */
TH_API int th_cancel_signalled(const th_cancel *cancel);
/* Only once no operation it was given to is running. NULL is a no-op. */
TH_API void th_cancel_destroy(th_cancel *cancel);

/* ------------------------------------------------------------------------- */
/* Fetch                                                                      */
/* ------------------------------------------------------------------------- */

/* Which chunks a fetch checks against the checksums their publisher declared
 * (versions published without checksums are not checked). */
typedef enum th_verify {
    TH_VERIFY_OFF = 0,
    TH_VERIFY_SAMPLE = 1, /* about one chunk in eight, drawn anew by every fetch */
    TH_VERIFY_ALL = 2
} th_verify;

#define TH_DEFAULT_PROGRESS_INTERVAL_MS 100
#define TH_DEFAULT_VERIFY TH_VERIFY_SAMPLE

typedef struct th_fetch_config {
    size_t struct_size;
    const char *model;    /* required */
    uint64_t version;     /* a version, or TH_LATEST (default) */
    uint32_t shard;       /* default 0 */
    uint32_t timeout_ms;  /* whole-fetch deadline; 0 = the client's default x 6 */
    const char *tensor;   /* NULL: the whole shard. Else fetch only this tensor: */
    uint64_t offset;      /*   byte offset inside it */
    uint64_t length;      /*   bytes to fetch; 0 = to the end of the tensor */
    th_sync_stats *stats; /* if not NULL, filled on success (see th_sync_stats).
                             Default NULL. */
    /* If not NULL, called with the bytes received so far and the bytes the
     * fetch needs: on the thread that called th_fetch, between transfers, at
     * most every progress_interval_ms, and once more with bytes_done ==
     * bytes_total when every byte arrived. No tensorhub lock is held. It should
     * return quickly: the fetch, and the readers that follow this one, wait
     * for it. It must not destroy the client, nor fetch into the same buffers.
     * Default NULL. */
    void (*progress)(uint64_t bytes_done, uint64_t bytes_total, void *user_data);
    void *progress_user_data;      /* passed to progress as user_data */
    uint32_t progress_interval_ms; /* Default TH_DEFAULT_PROGRESS_INTERVAL_MS; 0: whenever
                                      bytes may have arrived. */
    th_verify verify;     /* which chunks are checked against the checksums their
                             publisher declared; a chunk that does not match is read
                             again from another source and its worker reported
                             (counted in th_sync_stats.checksum_mismatches). Chunks a
                             partial fetch holds only in part are not checked.
                             Default TH_DEFAULT_VERIFY. */
    th_cancel *cancel;    /* if not NULL, th_cancel_signal(cancel) from any thread
                             ends the fetch with TH_ERR_CANCELED: at once if it was
                             signalled before, else within about 20 ms once its
                             reads have started (a request to the server in
                             progress is answered first), once its reads in flight
                             have landed or, after 200 ms, been closed. Default
                             NULL. */
} th_fetch_config;

TH_API void th_fetch_config_init(th_fetch_config *cfg, size_t size);

/* Fetches a shard of a committed version into the caller's buffers, pulling
 * the bytes directly from processes that hold it (no byte passes through the
 * server). For a whole shard, dst must list the shard's tensors in the
 * published order with the same names, dtypes and sizes; for a single tensor
 * (cfg->tensor set) dst is one buffer of exactly the requested length.
 * *out_version (may be NULL) receives the version delivered: with TH_LATEST,
 * the newest committed when the fetch started, or a newer one should every
 * holder of that one go away before it arrived whole (its trainer moved on).
 * If out_replica is not NULL (whole-shard fetches only), the fetched buffers
 * become a replica that serves the version to others until it is released;
 * the caller must then keep them unchanged until th_replica_release.
 * Errors: TH_ERR_NOT_FOUND, TH_ERR_NOT_COMMITTED, TH_ERR_LAYOUT_MISMATCH,
 * TH_ERR_INVALID_ARG, TH_ERR_UNAVAILABLE (no live holder), TH_ERR_TIMEOUT,
 * TH_ERR_TRANSPORT, TH_ERR_CANCELED (cfg->cancel). On failure the destination
 * content is unspecified, and nothing writes to it after the call returned. */
TH_API th_status th_fetch(th_client *client, const th_fetch_config *cfg,
                          const th_tensor *dst, size_t n, uint64_t *out_version,
                          th_replica **out_replica);

/* One strided piece of a published tensor and where it lands, for
 * th_fetch_ranges. It names `rows` runs of `row_bytes` bytes each: run i
 * starts at byte offset + i * src_stride of the tensor and lands at
 * dst + i * dst_stride. A contiguous byte range is rows = 1. Column block
 * [c0, c1) of a row-major [R, C] tensor of e-byte elements (what a
 * tensor-parallel rank of another degree needs): offset = c0 * e,
 * row_bytes = (c1 - c0) * e, rows = R, src_stride = C * e, and dst_stride =
 * row_bytes to pack the rows, or the row pitch of a wider destination to land
 * them inside it (gathering columns from several shards into one tensor).
 * Dimension d of any shape is the same with "rows" = the product of the
 * dimensions before d. This struct is frozen: its layout never changes (a
 * future version would add a new type). */
typedef struct th_range {
    const char *tensor;   /* name of a tensor of the shard; copied */
    uint64_t offset;      /* byte offset of run 0 inside the tensor */
    uint64_t row_bytes;   /* bytes per run, >= 1 */
    uint64_t rows;        /* number of runs, >= 1 */
    uint64_t src_stride;  /* bytes from one run's start to the next one's in the
                             tensor, >= row_bytes; ignored when rows == 1 */
    void *dst;            /* where run 0 lands; only referenced during the call */
    uint64_t dst_stride;  /* bytes between runs in dst; 0: row_bytes (packed).
                             Otherwise >= row_bytes */
    uint64_t dst_bytes;   /* bytes writable at dst: at least
                             (rows - 1) * dst_stride + row_bytes */
    th_mem_kind mem_kind; /* where dst lives */
    int32_t device;       /* CUDA device ordinal; ignored for host */
} th_range;

/* Fetches only the given ranges of one shard of a committed version, in ONE
 * fetch: one plan, then reads of just the ranges' bytes (a chunk that no range
 * touches is not read; inside a touched chunk only the ranges' runs are), each
 * landing at its range's destination. cfg says which model, version, shard,
 * deadline, stats (bytes counts the ranges' bytes only) and progress;
 * cfg->tensor must be NULL (its offset and length are ignored). Ranges may
 * name different tensors, or the same one several times. Destinations must
 * not overlap each other; they cannot serve others (no replica is made).
 * *out_version (may be NULL) receives the version delivered.
 * Errors name the range and tensor: TH_ERR_NOT_FOUND (no such tensor in the
 * shard), TH_ERR_INVALID_ARG (rows or bytes outside the tensor, a destination
 * smaller than its runs span, a zero row count or length, a stride shorter
 * than a run), and those of th_fetch. On failure the destination content is
 * unspecified. Thread-safe like th_fetch. */
TH_API th_status th_fetch_ranges(th_client *client, const th_fetch_config *cfg, const th_range *ranges,
                                 size_t n, uint64_t *out_version);

/* Resolves version (a number or TH_LATEST) of model to a committed version.
 * Errors: TH_ERR_NOT_FOUND (no such model or no committed version),
 * TH_ERR_NOT_COMMITTED (that version exists but is incomplete). */
TH_API th_status th_resolve(th_client *client, const char *model, uint64_t version,
                            uint64_t *out_version);

/* Waits until model has a committed version newer than newer_than (pass 0 for
 * "any"), without polling the server: the server publishes commits as events;
 * a missed event is caught by a query. *out_version receives that version.
 * Errors: TH_ERR_TIMEOUT when none appears within timeout_ms. It returns
 * within about timeout_ms (giving a query to the server at least 100 ms)
 * also when the server does not answer (TH_ERR_UNAVAILABLE, TH_ERR_TIMEOUT)
 * or is a standby that asks to ask again. */
TH_API th_status th_wait_for_version(th_client *client, const char *model, uint64_t newer_than,
                                     uint32_t timeout_ms, uint64_t *out_version);

/* th_wait_for_version that also ends, with TH_ERR_CANCELED, within about
 * 20 ms of cancel being signalled (th_cancel_signal, from any thread): for a
 * reader idle between versions that shuts down or is preempted. cancel may
 * be NULL. */
TH_API th_status th_wait_for_version_cancelable(th_client *client, const char *model, uint64_t newer_than,
                                                uint32_t timeout_ms, th_cancel *cancel, uint64_t *out_version);

/* Describes a shard of a committed version (a number or TH_LATEST) as JSON, so
 * that a reader can allocate its buffers before fetching:
 * {"model":..., "version":V, "num_shards":N, "shard":S, "chunk_bytes":C,
 *  "total_bytes":T, "tensors":[{"name":..., "dtype":"bfloat16",
 *  "dtype_id":6, "shape":[...], "nbytes":B}, ...]}.
 * *out_json is allocated by the library; free it with th_free. */
TH_API th_status th_describe_json(th_client *client, const char *model, uint64_t version, uint32_t shard,
                                  char **out_json);

/* ------------------------------------------------------------------------- */
/* Status                                                                     */
/* ------------------------------------------------------------------------- */

/* Asks the server for its state (workers, models, versions, shards, replicas,
 * bytes served per worker) as a JSON document. *out_json is allocated by the
 * library; free it with th_free. */
TH_API th_status th_status_json(th_client *client, char **out_json);

/* The same without a client: connects to server_url, asks, disconnects, all
 * within timeout_ms (0: TH_DEFAULT_TIMEOUT_MS). The
 * cluster token, if the server needs one, comes from $TENSORHUB_TOKEN.
 * server_url may also be the server's HTTP endpoint ("http://host:9090", see
 * th_server_config.metrics_url): the document then comes from GET
 * <url>/api/status, the one the live page reads. */
TH_API th_status th_server_status_json(const char *server_url, uint32_t timeout_ms,
                                       char **out_json);

#ifdef __cplusplus
}
#endif

#endif /* TENSORHUB_TENSORHUB_H */
