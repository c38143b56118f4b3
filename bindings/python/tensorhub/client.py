"""The client: publish, fetch and query weight versions."""

from __future__ import annotations

import ctypes
import math
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any, Literal, Union

import numpy as np

from ._common import LATEST, Handle, HandleOwner, close_at_exit, encode, to_ms, u32, u64, version_arg
from ._errors import InvalidArgument, Retained, TensorHubError, Timeout, check, error_for
from ._lib import ClientConfig, FetchConfig, PublishConfig, SyncStats, lib, new_config, take_json
from ._ranges import Range, to_c_ranges
from ._sync import ProgressCallback, ProgressHook, new_stats, stats_dict, stats_pointer
from ._tensors import DType, Tensors, TensorLike, View, numpy_dtype, to_c, torch_dtype, view_of, views_of, with_dtype
from .cancel import Cancel
from .replica import Replica
from .server import Server

__all__ = ["Client"]

Labels = Union[Mapping[str, str], str, None]
Retention = Literal["spill", "wait", "fail"]

_RETENTION = {"spill": 0, "wait": 1, "fail": 2}
Verify = Literal["off", "sample", "all"]
_VERIFY = {"off": 0, "sample": 1, "all": 2}


def _verify(verify: Verify | None) -> int | None:
    if verify is None:
        return None
    if verify not in _VERIFY:
        raise InvalidArgument(-1, f"verify must be one of {sorted(_VERIFY)}, got {verify!r}")
    return _VERIFY[verify]

# wait_for_version(timeout=None) waits in slices of this many seconds: every C
# call needs a deadline, and between slices Python can deliver KeyboardInterrupt.
_WAIT_SLICE = 2.0


def _labels(labels: Labels) -> bytes | None:
    if labels is None:
        return None
    if isinstance(labels, str):
        return encode(labels, "labels")
    parts = []
    for key, value in labels.items():
        key, value = str(key), str(value)
        if not key or any(c in key + value for c in ",="):
            raise InvalidArgument(-1, f"label {key!r}={value!r}: keys must be non-empty and neither may "
                                  "contain ',' or '='")
        parts.append(f"{key}={value}")
    return encode(",".join(parts), "labels")


def _progress_hook(progress: ProgressCallback | None, interval: float | None) -> ProgressHook:
    return ProgressHook(progress, None if interval is None else to_ms(interval, "progress_interval"))


def _fetch_config(model: str, version: int, shard: int, timeout: float | None,
                  hook: ProgressHook, cancel: Cancel | None) -> tuple[FetchConfig, SyncStats]:
    """What th_fetch and th_fetch_ranges share of their th_fetch_config, and
    the stats struct it points at (keep both, `hook` and `cancel` through the
    call, and check its status with hook.check)."""
    cfg = new_config(FetchConfig, lib.th_fetch_config_init)
    cfg.model = encode(model, "model")
    cfg.version = version_arg(version)
    cfg.shard = u32(shard, "shard")
    # 0 means "the client's default x 6" to the library.
    cfg.timeout_ms = 0 if timeout is None else to_ms(timeout, "timeout", minimum=1)
    hook.install(cfg, cancel)
    stats = new_stats()
    cfg.stats = stats_pointer(stats)
    return cfg, stats


class Client(HandleOwner):
    """A worker's connection to a tensorhub server.

    Creating it opens its data-plane worker and registers with the server. All
    methods are thread-safe. Close it with close() or a ``with`` block; that
    withdraws every replica it still holds. Closing is idempotent, and a
    client that is garbage-collected or still open at exit is closed then.

    Args:
        server: the server's URL (e.g. "tcp://10.0.0.1:7070") or a Server.
        name: the worker name shown in status (default "<hostname>-<pid>").
        labels: topology labels, a dict or "dc=eu,rack=r7,host=node12";
            readers are served by the nearest holder.
        timeout: deadline of control calls, in seconds.
        heartbeat: heartbeat period, in seconds.
        chunk_timeout: a chunk read making no progress for this long fails its source.
        max_inflight: chunk reads in flight per fetch (per stripe when striped).
        retention: what begin_mutation/release do with the last complete copy of
            a required version: "spill" it into library memory, "wait" for
            another copy, or "fail" with Retained.
        mutation_wait: how long begin_mutation waits for reads in flight, in seconds.
        token: the cluster token, if the server has one (default $TENSORHUB_TOKEN).
        spill_pool: bytes of host memory the library may hold for owned copies
            ("spill"/"wait" retention); 0 means no limit. Each publish prepares
            a buffer of the replica's size in the background, reused across
            versions; a spill that does not fit raises OutOfMemory.
        spill_ahead: make the copy a spill would need right after each publish,
            on a library thread, so that begin_mutation after other work (the
            next step's forward and backward) does not wait for it.
        copy_threads: threads that post one-sided reads into host memory (1 to
            16). On one host each read is a copy made by the thread that posts
            it, so more threads read faster where cores are free.

        Settings left at None take the library's defaults (TH_DEFAULT_* in
        tensorhub.h, read back from th_client_config_init).

    Raises:
        Unavailable: the server cannot be reached within `timeout`.
    """

    def __init__(self, server: str | Server, name: str | None = None, labels: Labels = None,
                 timeout: float | None = None, heartbeat: float | None = None, chunk_timeout: float | None = None,
                 max_inflight: int | None = None, retention: Retention | None = None,
                 mutation_wait: float | None = None, token: str | None = None,
                 spill_pool: int | None = None, spill_ahead: bool | None = None,
                 copy_threads: int | None = None) -> None:
        url = server.url if isinstance(server, Server) else server
        if retention is not None and retention not in _RETENTION:
            raise InvalidArgument(-1, f"retention must be one of {sorted(_RETENTION)}, got {retention!r}")
        cfg = new_config(ClientConfig, lib.th_client_config_init)
        cfg.server_url = encode(url, "server")
        if name is not None:
            cfg.worker_name = encode(name, "name")
        cfg.labels = _labels(labels)
        if timeout is not None:
            cfg.timeout_ms = to_ms(timeout, "timeout", minimum=1)
        if heartbeat is not None:
            cfg.heartbeat_ms = to_ms(heartbeat, "heartbeat", minimum=1)
        if chunk_timeout is not None:
            cfg.chunk_timeout_ms = to_ms(chunk_timeout, "chunk_timeout", minimum=1)
        if max_inflight is not None:
            cfg.max_inflight = u32(max_inflight, "max_inflight")
        if retention is not None:
            cfg.retention = _RETENTION[retention]
        if mutation_wait is not None:
            cfg.mutation_wait_ms = to_ms(mutation_wait, "mutation_wait")
        if token is not None:
            cfg.token = encode(token, "token")
        if spill_pool is not None:
            cfg.spill_pool_bytes = u64(spill_pool, "spill_pool")
        if spill_ahead is not None:
            cfg.spill_ahead = 1 if spill_ahead else 0
        if copy_threads is not None:
            cfg.copy_threads = u32(copy_threads, "copy_threads")
        out = ctypes.c_void_p()
        check(lib.th_client_create(ctypes.byref(out), ctypes.byref(cfg)))
        self._handle = Handle(out.value or 0, lib.th_client_destroy, "client")
        self._url = url
        self._worker_id = int(lib.th_client_worker_id(out))
        self._lock = threading.Lock()  # guards the two collections below
        self._replicas: set[Replica] = set()  # every live replica, so that close() can free them
        # fetch(serve=True) replicas by (model, shard): the newest, plus older
        # ones whose release the retention policy refused (Retained).
        self._served: dict[tuple[str, int], list[Replica]] = {}
        self._last = threading.local()  # last_sync_stats, per calling thread
        close_at_exit(self, order=0)

    # ------------------------------------------------------------------ #
    # Lifetime
    # ------------------------------------------------------------------ #

    @property
    def worker_id(self) -> int:
        """The id the server knows this client by."""
        return self._worker_id

    @property
    def last_sync_stats(self) -> dict[str, Any] | None:
        """The summary of the last successful fetch or publish this client
        made on the calling thread (None before any), as a plain dict ready
        for wandb.log or mlflow.log_metrics:

        {"op": "fetch" | "publish", "model", "shard", "version", "bytes",
        "seconds", "gbps", "sources", "replans", "failed_sources", "chunks",
        "bytes_from_publisher", "bytes_from_replicas", "checksum_mismatches",
        "bytes_one_sided", "bytes_waited", "bytes_kept", "server_seconds"}

        bytes_one_sided is how many of the bytes were read with one-sided
        GETs (no CPU of the holder touched them); bytes_waited how many were
        asked for from a reader still receiving them and sent the moment it
        had them (a chain of readers over tcp); bytes_kept how many came from
        a source whose replica then changed and were kept (its holder let
        them finish first); server_seconds how much of seconds the call
        waited for the metadata server's replies (a fetch's plan and end
        report, a publish's declaration: a fixed cost per call). For a
        publish, bytes and chunks are what was declared, and gbps, sources
        and the bytes_* counts of how bytes moved are 0 (nothing moved)."""
        stats: dict[str, Any] | None = getattr(self._last, "stats", None)
        return dict(stats) if stats is not None else None

    def close(self) -> None:
        """Withdraws every replica this client still holds, disconnects and
        frees the client, as th_client_destroy does: the retention policy does
        not apply (a version only this client held is no longer readable), and
        the replicas' buffers are the caller's again (Replica.release is then a
        no-op). Waits for calls in flight on other threads; later calls raise
        Closed. Idempotent."""
        self._handle.close(after_destroy=self._free_replicas)

    def _free_replicas(self) -> None:
        # th_client_destroy withdrew them: releasing a handle now only frees it.
        with self._lock:
            replicas = list(self._replicas)
            self._replicas.clear()
            self._served.clear()
        for r in replicas:
            r._free_after_close()

    def __repr__(self) -> str:
        state = " closed" if self.closed else ""
        return f"<tensorhub.Client worker {self._worker_id} of {self._url}{state}>"

    def _adopt(self, ptr: int, model: str, shard: int, views: list[View]) -> Replica:
        # Called inside a use() block, so close() cannot miss the new replica.
        replica = Replica(self, ptr, model, shard, views)
        with self._lock:
            self._replicas.add(replica)
        return replica

    def _forget(self, replica: Replica) -> None:
        with self._lock:
            self._replicas.discard(replica)
            served = self._served.get((replica.model, replica.shard), [])
            if replica in served:
                served.remove(replica)

    # ------------------------------------------------------------------ #
    # Publish
    # ------------------------------------------------------------------ #

    def publish(self, model: str, version: int, tensors: Tensors, shard: int = 0, num_shards: int | None = None,
                chunk_bytes: int | None = None, checksums: bool | None = None) -> Replica:
        """Declares that this process holds `version` of `model` (one shard) in
        `tensors` and serves it from there. Nothing is copied.

        The version becomes visible once every shard is published. Keep the
        returned Replica (or let the client keep it) and do not modify the
        tensors until it is released.

        Args:
            tensors: a state_dict (name -> tensor, published in dict order) or
                (name, tensor) pairs. Tensors must be contiguous.
            version: chosen by the publisher, strictly increasing per model.
            num_shards: None: TH_DEFAULT_NUM_SHARDS (one).
            chunk_bytes: unit of progress, checksums and reads; must agree
                across shards. None:
                TH_DEFAULT_CHUNK_BYTES.
            checksums: compute a checksum of every chunk for readers to
                check (one pass over the bytes). None: TH_DEFAULT_CHECKSUMS (on).

        Raises:
            InvalidArgument, Conflict (another publisher declared other
            bytes for this shard of the version), Unavailable, Timeout.
        """
        views = views_of(tensors, writable=False)
        return self._publish(model, version, views, to_c(views), shard, num_shards, chunk_bytes, checksums)

    def _publish(self, model: str, version: int, views: list[View], c_tensors: Any, shard: int,
                 num_shards: int | None, chunk_bytes: int | None, checksums: bool | None = None) -> Replica:
        # c_tensors: to_c(views), which a caller publishing the same buffers
        # again may keep and pass back (it is 1-2 us per tensor to build).
        cfg = new_config(PublishConfig, lib.th_publish_config_init)
        cfg.model = encode(model, "model")
        cfg.version = version_arg(version)
        cfg.shard = u32(shard, "shard")
        if num_shards is not None:
            cfg.num_shards = u32(num_shards, "num_shards")
        if chunk_bytes is not None:
            cfg.chunk_bytes = version_arg(chunk_bytes, "chunk_bytes")
        if checksums is not None:
            cfg.checksums = 1 if checksums else 0
        stats = new_stats()
        cfg.stats = stats_pointer(stats)
        out = ctypes.c_void_p()
        with self._handle.use() as ptr:
            check(lib.th_publish(ptr, ctypes.byref(cfg), c_tensors, len(views), ctypes.byref(out)))
            replica = self._adopt(out.value or 0, model, shard, views)
        self._last.stats = stats_dict("publish", model, shard, stats)
        return replica

    # ------------------------------------------------------------------ #
    # Fetch
    # ------------------------------------------------------------------ #

    def _fetch(self, model: str, version: int, views: list[View], shard: int, timeout: float | None,
               serve: bool, tensor: str | None = None, offset: int = 0,
               hook: ProgressHook | None = None, c_tensors: Any = None,
               verify: Verify | None = None, cancel: Cancel | None = None) -> tuple[int, Replica | None]:
        # A progress callback that raised cancels the fetch: then this raises
        # what it raised; if the fetch succeeded even so, the caller raises it
        # (hook.raise_if_failed) once its own bookkeeping is done. c_tensors:
        # to_c(views), if the caller keeps it across fetches into the same
        # buffers.
        if hook is None:
            hook = ProgressHook(None)
        cfg, stats = _fetch_config(model, version, shard, timeout, hook, cancel)
        if tensor is not None:
            cfg.tensor = encode(tensor, "name")
            cfg.offset = version_arg(offset, "offset")
            cfg.length = views[0].nbytes
        if (mode := _verify(verify)) is not None:
            cfg.verify = mode
        if c_tensors is None:
            c_tensors = to_c(views)
        got = ctypes.c_uint64()
        out = ctypes.c_void_p()
        with self._handle.use() as ptr:
            hook.check(lib.th_fetch(ptr, ctypes.byref(cfg), c_tensors, len(views), ctypes.byref(got),
                                    ctypes.byref(out) if serve else None))
            replica = self._adopt(out.value or 0, model, shard, views) if serve else None
        self._last.stats = stats_dict("fetch", model, shard, stats)
        return int(got.value), replica

    def fetch(self, model: str, version: int = LATEST, *, into: Tensors, shard: int = 0,
              timeout: float | None = None, serve: bool = True,
              progress: ProgressCallback | None = None, progress_interval: float | None = None,
              verify: Verify | None = None, cancel: Cancel | None = None) -> int:
        """Fetches a shard of `version` (default: the newest committed) into
        the caller's tensors, reading directly from processes that hold it.

        Args:
            into: the destination, a state_dict or (name, tensor) pairs with
                the published names, order, dtypes and sizes; contiguous and writable.
            timeout: whole-fetch deadline in seconds (None: 6x the client timeout).
            progress: called as progress(bytes_done, bytes_total) on this
                thread, at most every 100 ms and once at the end. An exception
                it raises ends the fetch, as a cancel would (`cancel` itself is
                left alone), and fetch raises it, its __context__ the Canceled
                the fetch ended with; raised by the last call (bytes_done ==
                bytes_total), after the completed fetch. It is not called
                again.
            progress_interval: the least time between two progress calls, in
                seconds (None: 0.1; 0: whenever bytes may have arrived).
            verify: which chunks are checked against their publisher's
                checksums: "off", "sample" (about one in eight) or "all".
                A chunk that does not match is read again from another holder
                (last_sync_stats()["checksum_mismatches"]). None: the library's
                default (TH_DEFAULT_VERIFY, "sample").
            cancel: a Cancel token; its cancel(), from any thread, ends the
                fetch with Canceled (`into` then holds parts of the version).
            serve: keep serving the fetched version from `into` afterwards. The
                client then holds the replica for (model, shard) and releases
                the previous one only after this fetch succeeded, so a reader can
                alternate between two buffers and serve throughout. If `into`
                is the previous replica's memory, that one is released first
                (its bytes are about to be overwritten). Call
                stop_serving(model, shard) before modifying `into` yourself.

        Returns:
            The version delivered.

        Raises:
            VersionNotFound, NotCommitted, LayoutMismatch, InvalidArgument,
            Unavailable (no live holder), Timeout, TransportError, Canceled.
        """
        views = views_of(into, writable=True)
        hook = _progress_hook(progress, progress_interval)
        if not serve:
            got = self._fetch(model, version, views, shard, timeout, serve=False, hook=hook, verify=verify,
                              cancel=cancel)[0]
            hook.raise_if_failed()
            return got
        key = (model, shard)
        with self._lock:
            served = list(self._served.get(key, []))
        for old in served:
            if old._overlaps(views):
                old.release()  # Retained propagates: those bytes must not be overwritten
        got, replica = self._fetch(model, version, views, shard, timeout, serve=True, hook=hook, verify=verify,
                                   cancel=cancel)
        assert replica is not None
        with self._lock:
            older = self._served.get(key, [])
            self._served[key] = [replica]
        for old in older:
            try:
                old.release()
            except Retained:
                # Still the last copy of a required version: keep serving it
                # until its buffers are fetched into again.
                with self._lock:
                    self._served[key].insert(0, old)
            except TensorHubError:
                pass  # the handle is released anyway; the fetch itself succeeded
        hook.raise_if_failed()
        return got

    def fetch_replica(self, model: str, version: int = LATEST, *, into: Tensors, shard: int = 0,
                      timeout: float | None = None, progress: ProgressCallback | None = None,
                      progress_interval: float | None = None, verify: Verify | None = None,
                      cancel: Cancel | None = None) -> tuple[int, Replica]:
        """Like fetch(serve=True), but the caller owns the resulting Replica
        and releases it (or uses it as a context manager).

        Returns:
            (version delivered, the replica serving it from `into`).
        """
        hook = _progress_hook(progress, progress_interval)
        got, replica = self._fetch(model, version, views_of(into, writable=True), shard, timeout, serve=True, hook=hook,
                                   verify=verify, cancel=cancel)
        assert replica is not None
        try:
            hook.raise_if_failed()
        except BaseException:
            try:
                replica.release()  # the caller never gets the handle
            except TensorHubError:
                pass  # Retained: the client keeps it and frees it on close()
            raise
        return got, replica

    def stop_serving(self, model: str, shard: int = 0) -> None:
        """Releases the replicas fetch(serve=True) keeps for (model, shard), if
        any, so that their buffers may be modified.

        Raises:
            Retained: one is the last copy of a required version and the
                retention policy is "fail"; it keeps serving.
        """
        with self._lock:
            served = list(self._served.get((model, shard), []))
        for replica in served:
            replica.release()

    def fetch_tensor(self, model: str, name: str, into: TensorLike, version: int = LATEST, shard: int = 0,
                     offset: int = 0, timeout: float | None = None) -> int:
        """Fetches one tensor, or the bytes [offset, offset + into.nbytes) of
        it, into `into` (any dtype; only its size matters).

        Returns:
            The version delivered.
        """
        view = view_of(name, into, writable=True)
        if view.nbytes == 0:
            raise InvalidArgument(-1, f"the destination for tensor '{name}' is empty")
        return self._fetch(model, version, [view], shard, timeout, serve=False, tensor=name, offset=offset)[0]

    def fetch_ranges(self, model: str, ranges: Range | list[Range], version: int = LATEST, *, shard: int = 0,
                     timeout: float | None = None, progress: ProgressCallback | None = None,
                     progress_interval: float | None = None, cancel: Cancel | None = None) -> int:
        """Fetches only the given parts of a shard's tensors, in one fetch:
        one plan, then reads of just those bytes, each landing in its range's
        destination (th_fetch_ranges). A column block of a row-major tensor is
        one Range (Range.block), not one fetch per row. The destinations do
        not serve others. last_sync_stats["bytes"] counts the ranges' bytes.

        Returns:
            The version delivered.

        Raises:
            VersionNotFound (also: no such tensor in the shard), InvalidArgument
            (rows outside the tensor, a destination smaller than its runs span;
            the message names the range and tensor), and what fetch raises.
        """
        c_ranges, views = to_c_ranges(ranges)
        hook = _progress_hook(progress, progress_interval)
        cfg, stats = _fetch_config(model, version, shard, timeout, hook, cancel)
        got = ctypes.c_uint64()
        with self._handle.use() as ptr:
            hook.check(lib.th_fetch_ranges(ptr, ctypes.byref(cfg), c_ranges, len(views), ctypes.byref(got)))
        del views  # kept the destinations alive through the call
        self._last.stats = stats_dict("fetch", model, shard, stats)
        hook.raise_if_failed()
        return int(got.value)

    def describe(self, model: str, version: int = LATEST, shard: int = 0) -> dict[str, Any]:
        """Describes a shard of a committed version, so that buffers can be
        allocated before fetching:
        {"model", "version", "num_shards", "shard", "chunk_bytes", "total_bytes",
        "tensors": [{"name", "dtype", "dtype_id", "shape", "nbytes"}, ...]}.
        """
        out = ctypes.c_void_p()
        with self._handle.use() as ptr:
            check(lib.th_describe_json(ptr, encode(model, "model"), version_arg(version), u32(shard, "shard"),
                                       ctypes.byref(out)))
        return take_json(out)

    def fetch_iter(self, model: str, version: int = LATEST, shard: int = 0, device: str = "cpu",
                   like: Literal["numpy", "torch"] = "numpy",
                   timeout: float | None = None,
                   progress: ProgressCallback | None = None) -> Iterator[tuple[str, Any]]:
        """Fetches a shard into newly allocated arrays and yields (name, array)
        in published order. The whole shard is fetched (from one version)
        before the first item is yielded; errors are raised by this call.

        Args:
            like: "numpy" (device must be "cpu") or "torch" (any torch device,
                e.g. "cuda:0"; needs torch).

        bfloat16/float8 tensors come as ml_dtypes arrays when ml_dtypes is
        installed, else as uint16/uint8 arrays holding the raw bits.
        """
        if like not in ("numpy", "torch"):
            raise InvalidArgument(-1, f"like must be 'numpy' or 'torch', got {like!r}")
        if like == "numpy" and device != "cpu":
            raise InvalidArgument(-1, f"numpy arrays live on the CPU; use like='torch' for device {device!r}")
        desc = self.describe(model, version, shard)
        pairs: list[tuple[str, Any]] = []
        dst: list[tuple[str, Any]] = []
        for t in desc["tensors"]:
            dtype = DType(t["dtype_id"])
            shape = tuple(t["shape"])
            if like == "torch":
                import torch

                array: Any = torch.empty(shape, dtype=torch_dtype(dtype), device=device)
                target: Any = array
            else:
                np_dtype, exact = numpy_dtype(dtype)
                array = np.empty(shape, dtype=np_dtype)
                target = array if exact else with_dtype(array, dtype)
            pairs.append((t["name"], array))
            dst.append((t["name"], target))
        self.fetch(model, desc["version"], into=dst, shard=shard, timeout=timeout, serve=False, progress=progress)
        return iter(pairs)

    # ------------------------------------------------------------------ #
    # Versions and status
    # ------------------------------------------------------------------ #

    def resolve(self, model: str, version: int = LATEST) -> int:
        """The committed version `version` (a number or LATEST) refers to.

        Raises:
            VersionNotFound: no such model or no committed version.
            NotCommitted: that version exists but is incomplete.
        """
        out = ctypes.c_uint64()
        with self._handle.use() as ptr:
            check(lib.th_resolve(ptr, encode(model, "model"), version_arg(version), ctypes.byref(out)))
        return int(out.value)

    def wait_for_version(self, model: str, newer_than: int = 0, timeout: float | None = None,
                         cancel: Cancel | None = None) -> int:
        """Waits until `model` has a committed version newer than `newer_than`
        (0: any) and returns it. The server pushes commits; this does not poll.

        Args:
            timeout: seconds; None waits until one appears.
            cancel: a Cancel token; its cancel(), from any thread, ends the
                wait within about 20 ms with Canceled.

        Raises:
            Timeout: none appeared within `timeout`.
            Canceled: `cancel` was canceled first.
        """
        model_arg = encode(model, "model")
        newer = version_arg(newer_than, "newer_than")
        deadline = None if timeout is None else time.monotonic() + to_ms(timeout, "timeout") / 1000
        out = ctypes.c_uint64()
        while True:
            remaining = _WAIT_SLICE if deadline is None else min(_WAIT_SLICE, deadline - time.monotonic())
            with self._handle.use() as ptr:
                status = lib.th_wait_for_version_cancelable(ptr, model_arg, newer,
                                                            max(0, math.ceil(remaining * 1000)),
                                                            None if cancel is None else cancel._pointer,
                                                            ctypes.byref(out))
                try:
                    check(status)
                    return int(out.value)
                except Timeout as e:
                    if deadline is not None and time.monotonic() >= deadline:
                        # The library timed out one slice; the caller waited all of `timeout`.
                        raise error_for(e.code, f"no version of model '{model}' newer than {newer_than} was "
                                                f"committed within {timeout:g} s") from None

    def pin(self, model: str, version: int) -> None:
        """Keeps (model, version) required until unpin(): its holders spill it
        rather than lose it. Pins end with the client."""
        with self._handle.use() as ptr:
            check(lib.th_pin(ptr, encode(model, "model"), version_arg(version)))

    def unpin(self, model: str, version: int) -> None:
        """Undoes pin()."""
        with self._handle.use() as ptr:
            check(lib.th_unpin(ptr, encode(model, "model"), version_arg(version)))

    def status(self) -> dict[str, Any]:
        """The server's state: workers, models, versions, shards, replicas and
        who read from whom (see also tensorhub.server_status)."""
        out = ctypes.c_void_p()
        with self._handle.use() as ptr:
            check(lib.th_status_json(ptr, ctypes.byref(out)))
        return take_json(out)

