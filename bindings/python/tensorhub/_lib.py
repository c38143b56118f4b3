"""Raw ctypes declarations of include/tensorhub/tensorhub.h.

Nothing here is public API: this module only finds libtensorhub, mirrors its
structs and enums, and declares argtypes/restype for every function, so that a
mistyped call fails in ctypes instead of corrupting memory. The Python-level
API (tensorhub.Client, tensorhub.Server, ...) is built on top of it.
"""

from __future__ import annotations

import ctypes
import json
import os
from ctypes import (
    POINTER,
    Structure,
    CFUNCTYPE,
    c_char_p,
    c_double,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_uint32,
    c_uint64,
    c_void_p,
)
from pathlib import Path
from typing import Any, Callable, TypeVar

__all__ = ["lib", "path", "TH_MAX_DIMS", "TH_LATEST", "Tensor", "Range", "ServerConfig", "ClientConfig",
           "SyncStats", "ProgressFn", "PublishConfig", "FetchConfig", "new_config", "take_json"]

TH_MAX_DIMS = 8
TH_LATEST = 2**64 - 1

# th_status, th_dtype, th_mem_kind and th_retention are C enums: int-sized.
c_enum = c_int

_PACKAGE_DIR = Path(__file__).resolve().parent
# bindings/python/tensorhub/_lib.py -> the repository root is three levels up.
_SOURCE_BUILD = _PACKAGE_DIR.parent.parent.parent / "build" / "libtensorhub.so"


def _candidates() -> list[Path]:
    """Where libtensorhub is looked for, in order."""
    found: list[Path] = []
    env = os.environ.get("TENSORHUB_LIB")
    if env:
        p = Path(env)
        found.append(p / "libtensorhub.so" if p.is_dir() else p)
    bundled = _PACKAGE_DIR / "lib"
    # Prefer the unversioned name, then the most specific versioned one.
    found.extend(sorted(bundled.glob("libtensorhub.so*"), key=lambda q: (q.name != "libtensorhub.so", q.name)))
    if not any(q.parent == bundled for q in found):
        found.append(bundled / "libtensorhub.so")
    found.append(_SOURCE_BUILD)
    return found


def _load() -> tuple[ctypes.CDLL, Path]:
    tried: list[str] = []
    for candidate in _candidates():
        if not candidate.exists():
            tried.append(f"{candidate} (not found)")
            continue
        try:
            return ctypes.CDLL(str(candidate)), candidate
        except OSError as e:
            # A library that exists but cannot load (missing UCX, wrong arch)
            # is named in the error if no later candidate loads either.
            tried.append(f"{candidate} ({e})")
    raise ImportError(
        "tensorhub: cannot load libtensorhub.so. Tried, in order:\n  "
        + "\n  ".join(tried)
        + "\nSet TENSORHUB_LIB to the library's path, install the package with the library bundled "
        "(pip install --no-build-isolation ./bindings/python), or build the C library first "
        "(scripts/build.sh)."
    )


lib, path = _load()


# --------------------------------------------------------------------------- #
# Structs. Field order and types mirror the header exactly; tests/test_abi.py
# compares sizeof/offsetof against a C compiler.
# --------------------------------------------------------------------------- #


class Tensor(Structure):
    """th_tensor (frozen layout)."""

    _fields_ = [
        ("name", c_char_p),
        ("dtype", c_enum),
        ("ndim", c_uint32),
        ("shape", c_int64 * TH_MAX_DIMS),
        ("data", c_void_p),
        ("nbytes", c_uint64),
        ("mem_kind", c_enum),
        ("device", c_int32),
    ]


class Range(Structure):
    """th_range (frozen layout)."""

    _fields_ = [
        ("tensor", c_char_p),
        ("offset", c_uint64),
        ("row_bytes", c_uint64),
        ("rows", c_uint64),
        ("src_stride", c_uint64),
        ("dst", c_void_p),
        ("dst_stride", c_uint64),
        ("dst_bytes", c_uint64),
        ("mem_kind", c_enum),
        ("device", c_int32),
    ]


class ServerConfig(Structure):
    """th_server_config."""

    _fields_ = [
        ("struct_size", c_size_t),
        ("listen_url", c_char_p),
        ("lease_ms", c_uint32),
        ("max_readers_per_source", c_uint32),
        ("token", c_char_p),
        ("metrics_url", c_char_p),
        ("standby", c_uint32),
        ("etcd_endpoints", c_char_p),
        ("etcd_prefix", c_char_p),
        ("etcd_lease_ms", c_uint32),
        ("advertise_url", c_char_p),
        ("stripes", c_uint32),
    ]


class ClientConfig(Structure):
    """th_client_config."""

    _fields_ = [
        ("struct_size", c_size_t),
        ("server_url", c_char_p),
        ("worker_name", c_char_p),
        ("labels", c_char_p),
        ("timeout_ms", c_uint32),
        ("heartbeat_ms", c_uint32),
        ("chunk_timeout_ms", c_uint32),
        ("max_inflight", c_uint32),
        ("retention", c_enum),
        ("mutation_wait_ms", c_uint32),
        ("token", c_char_p),
        ("spill_pool_bytes", c_uint64),
        ("spill_ahead", c_uint32),
        ("copy_threads", c_uint32),
    ]


class SyncStats(Structure):
    """th_sync_stats."""

    _fields_ = [
        ("struct_size", c_size_t),
        ("version", c_uint64),
        ("bytes", c_uint64),
        ("seconds", c_double),
        ("gbps", c_double),
        ("sources", c_uint32),
        ("replans", c_uint32),
        ("failed_sources", c_uint32),
        ("chunks", c_uint32),
        ("bytes_from_publisher", c_uint64),
        ("bytes_from_replicas", c_uint64),
        ("checksum_mismatches", c_uint32),
        ("bytes_one_sided", c_uint64),
        ("bytes_waited", c_uint64),
        ("bytes_kept", c_uint64),
        ("server_seconds", c_double),
    ]


# th_fetch_config.progress: void (*)(uint64_t bytes_done, uint64_t bytes_total, void *user_data).
ProgressFn = CFUNCTYPE(None, c_uint64, c_uint64, c_void_p)
# th_log_fn: void (*)(th_log_level level, const char *message, void *user_data).
LogFn = CFUNCTYPE(None, c_enum, c_char_p, c_void_p)


class PublishConfig(Structure):
    """th_publish_config."""

    _fields_ = [
        ("struct_size", c_size_t),
        ("model", c_char_p),
        ("version", c_uint64),
        ("shard", c_uint32),
        ("num_shards", c_uint32),
        ("chunk_bytes", c_uint64),
        ("stats", POINTER(SyncStats)),
        ("checksums", c_uint32),
    ]


class FetchConfig(Structure):
    """th_fetch_config."""

    _fields_ = [
        ("struct_size", c_size_t),
        ("model", c_char_p),
        ("version", c_uint64),
        ("shard", c_uint32),
        ("timeout_ms", c_uint32),
        ("tensor", c_char_p),
        ("offset", c_uint64),
        ("length", c_uint64),
        ("stats", POINTER(SyncStats)),
        ("progress", ProgressFn),
        ("progress_user_data", c_void_p),
        ("progress_interval_ms", c_uint32),
        ("verify", c_enum),
        ("cancel", c_void_p),
    ]


# Opaque handles are plain void pointers: ctypes never dereferences them.
server_p = c_void_p
client_p = c_void_p
replica_p = c_void_p
status_t = c_enum


def _declare(name: str, restype: object, *argtypes: object) -> None:
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)


# Errors and versions.
_declare("th_status_str", c_char_p, status_t)
_declare("th_last_error", c_char_p)
_declare("th_free", None, c_void_p)
_declare("th_version", c_char_p)
_declare("th_version_number", c_uint32)
# Logging.
_declare("th_set_log_handler", None, LogFn, c_void_p)
_declare("th_set_log_level", status_t, c_enum)
_declare("th_get_log_level", c_enum)
# Tensors.
_declare("th_dtype_size", c_size_t, c_enum)
# Server.
_declare("th_server_config_init", None, POINTER(ServerConfig), c_size_t)
_declare("th_server_create", status_t, POINTER(server_p), POINTER(ServerConfig))
_declare("th_server_url", c_char_p, server_p)
_declare("th_server_metrics_url", c_char_p, server_p)
_declare("th_server_destroy", None, server_p)
# Client.
_declare("th_client_config_init", None, POINTER(ClientConfig), c_size_t)
_declare("th_client_create", status_t, POINTER(client_p), POINTER(ClientConfig))
_declare("th_client_destroy", None, client_p)
_declare("th_client_worker_id", c_uint64, client_p)
# Replicas.
_declare("th_sync_stats_init", None, POINTER(SyncStats), c_size_t)
_declare("th_publish_config_init", None, POINTER(PublishConfig), c_size_t)
_declare("th_publish", status_t, client_p, POINTER(PublishConfig), POINTER(Tensor), c_size_t, POINTER(replica_p))
_declare("th_replica_version", c_uint64, replica_p)
_declare("th_replica_withdrawn", c_int, replica_p)
_declare("th_replica_release", status_t, replica_p)
_declare("th_replica_begin_mutation", status_t, replica_p)
_declare("th_pin", status_t, client_p, c_char_p, c_uint64)
_declare("th_unpin", status_t, client_p, c_char_p, c_uint64)
# Cancellation.
_declare("th_cancel_create", status_t, POINTER(c_void_p))
_declare("th_cancel_create_linked", status_t, c_void_p, POINTER(c_void_p))
_declare("th_cancel_signal", None, c_void_p)
_declare("th_cancel_signalled", c_int, c_void_p)
_declare("th_cancel_destroy", None, c_void_p)
# Fetch.
_declare("th_fetch_config_init", None, POINTER(FetchConfig), c_size_t)
_declare("th_fetch", status_t, client_p, POINTER(FetchConfig), POINTER(Tensor), c_size_t, POINTER(c_uint64),
         POINTER(replica_p))
_declare("th_fetch_ranges", status_t, client_p, POINTER(FetchConfig), POINTER(Range), c_size_t, POINTER(c_uint64))
_declare("th_resolve", status_t, client_p, c_char_p, c_uint64, POINTER(c_uint64))
_declare("th_wait_for_version", status_t, client_p, c_char_p, c_uint64, c_uint32, POINTER(c_uint64))
_declare("th_wait_for_version_cancelable", status_t, client_p, c_char_p, c_uint64, c_uint32, c_void_p,
         POINTER(c_uint64))
# JSON outputs are char** filled by the library: declared as void** so that
# ctypes hands back the raw pointer, which must go back to th_free.
_declare("th_describe_json", status_t, client_p, c_char_p, c_uint64, c_uint32, POINTER(c_void_p))
_declare("th_status_json", status_t, client_p, POINTER(c_void_p))
_declare("th_server_status_json", status_t, c_char_p, c_uint32, POINTER(c_void_p))


# --------------------------------------------------------------------------- #
# Config structs
# --------------------------------------------------------------------------- #

_Config = TypeVar("_Config", ServerConfig, ClientConfig, PublishConfig, FetchConfig, SyncStats)

def new_config(cls: type[_Config], init: Callable[..., None]) -> _Config:
    """A config struct initialised by its th_*_config_init function.

    The size passed is this binding's: the library writes no field past it,
    and gives fields it has beyond it (a newer library) their defaults."""
    cfg = cls()
    init(ctypes.byref(cfg), ctypes.sizeof(cls))
    if cfg.struct_size != ctypes.sizeof(cls) and not ctypes.sizeof(c_size_t) <= cfg.struct_size < ctypes.sizeof(cls):
        raise ImportError(f"tensorhub: {init.__name__} set struct_size {cfg.struct_size}; "
                          f"the loaded library {path} does not match this binding")
    return cfg


def take_json(ptr: c_void_p) -> dict[str, Any]:
    """Parses a library-allocated JSON char* and frees it with th_free."""
    try:
        text = ctypes.string_at(ptr.value).decode("utf-8") if ptr.value else "{}"
    finally:
        lib.th_free(ptr)
    parsed: dict[str, Any] = json.loads(text)
    return parsed
