"""What every reader shares: a plan (the destination of a published layout),
matching a layout against local tensors, and the fetch-and-retry loop."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from .._common import LATEST, to_ms, version_arg
from .._errors import (
    Canceled,
    Closed,
    LayoutMismatch,
    TensorHubError,
    Timeout,
    TransportError,
    Unavailable,
    VersionNotFound,
    error_for,
)
from .._sync import ProgressCallback, ProgressHook
from .._tensors import _BY_NAME, DType, View, to_c, torch_dtype, view_of
from ..cancel import Cancel
from ..client import Client
from ..replica import Replica
from ._collect import _synchronize, _what
from .digests import DIGEST_NAME, DigestMismatch, _check_digests

_TORN_ERRORS = (Unavailable, Timeout, TransportError, Closed, Canceled)
"""Errors that may come after bytes were written into the destination."""


def _spec(dtype_name: str, shape: Iterable[int]) -> str:
    return f"{dtype_name}{list(shape)}"


@dataclass
class _Plan:
    layout: tuple[tuple[str, int, tuple[int, ...]], ...]  # the published (name, dtype id, shape)
    pairs: list[tuple[str, torch.Tensor]]                # destinations in published order, digest included
    digest: torch.Tensor | None                          # where DIGEST_NAME lands, if published
    views: list[View] = field(init=False)                # the pairs as the binding passes them to C,
    c_tensors: Any = field(init=False)                   # built once: 10-15 us per tensor

    def __post_init__(self) -> None:
        self.views = [view_of(name, t, writable=True) for name, t in self.pairs]
        self.c_tensors = to_c(self.views)


def _layout(desc: dict[str, Any]) -> tuple[tuple[str, int, tuple[int, ...]], ...]:
    return tuple((t["name"], int(t["dtype_id"]), tuple(int(s) for s in t["shape"])) for t in desc["tensors"])


def _digest_buffer(layout: tuple[tuple[str, int, tuple[int, ...]], ...]) -> torch.Tensor | None:
    if not layout or layout[-1][0] != DIGEST_NAME:
        return None
    _, dtype_id, shape = layout[-1]
    return torch.empty(shape, dtype=torch_dtype(DType(dtype_id)))


def _torn(e: TensorHubError, what: str) -> TensorHubError:
    """`e`, saying that the destination may now hold parts of two versions."""
    out = error_for(e.code, f"{e.message}; {what} may have been partly overwritten and hold no complete "
                            "version: fetch again before using it")
    out.__cause__ = e
    return out


class _NewestGone:
    """What a fetch of the newest version (LATEST) does when the version it
    resolved goes away before it is fetched whole: the server forgot it (the
    trainer moved on and let it go before this reader asked for it), or
    every holder left mid-read. A newer one is usually committed by then:
    resolve again and fetch that. Receiver, Staging, Prefetcher and Reshard
    share it."""

    def __init__(self, asked: int, deadline: float, what: str) -> None:
        self._asked, self._deadline, self._what = asked, deadline, what
        self._gone: tuple[int, TensorHubError, bool] | None = None  # version, error, bytes may be written

    def went(self, version: int, e: TensorHubError, written: bool) -> None:
        """After `e` ended the attempt at `version`: returns to try again,
        or raises (a version asked for by number, the deadline passed, or
        an error that does not say the version went away)."""
        gone = isinstance(e, (VersionNotFound, Unavailable))
        if self._asked != LATEST or not gone or time.monotonic() >= self._deadline:
            raise _torn(e, self._what) if written else e
        self._gone = (version, e, written)

    def resolve(self, client: Client, model: str) -> int:
        """The version asked for, resolved for the next attempt; raises what
        ended the last attempt when no newer version came since."""
        resolved = client.resolve(model, self._asked)
        if self._gone is not None and resolved <= self._gone[0]:
            _, e, written = self._gone
            raise _torn(e, self._what) if written else e
        return resolved

    def timed_out(self, e: TensorHubError) -> TensorHubError:
        """`e`, torn if an earlier attempt may have written bytes."""
        return _torn(e, self._what) if self._gone is not None and self._gone[2] else e


class _Fetcher:
    """The retry loop Receiver, Staging and Prefetcher share: fetch a planned
    destination, re-plan when the version's layout changed, fetch the newest
    version again when every holder of the one asked for went away, verify
    digests. A fetch in flight on one thread ends (Canceled) when another
    calls cancel_running(): what the owners' close() does."""

    def __init__(self, client: Client, model: str, shard: int, verify: bool, serve: bool, what: str) -> None:
        self._client = client
        self.model = model
        self.shard = shard
        self._verify = verify
        self._serve = serve
        self._what = what
        self._replica: Replica | None = None
        self._plan: _Plan | None = None  # what the last fetch wrote into
        self.version: int | None = None
        self._ended = threading.Condition()
        self._running: Cancel | None = None  # the token of the fetch in flight
        self._runner: int | None = None  # and its thread

    def cancel_running(self) -> None:
        """Ends the fetch in flight on another thread, if any, and waits until
        it has: it raises Canceled there (its token, the caller's if it gave
        one, is signalled) about 20 ms after the signal, plus up to 200 ms
        for its reads in flight to land or be closed. Called from the
        fetching thread (a progress callback), it only signals."""
        with self._ended:
            if self._running is None:
                return
            self._running.cancel()
            if self._runner == threading.get_ident():
                return
            while self._running is not None:
                self._ended.wait()

    def release(self) -> None:
        if self._replica is not None:
            self._replica.release()  # Retained propagates: it stays served
            self._replica = None

    def run(self, version: int, timeout: float, plan_for: Callable[[int, bool], _Plan],
            on_done: Callable[[_Plan], None], progress: ProgressCallback | None = None,
            progress_interval: float | None = None, cancel: Cancel | None = None) -> int:
        """Fetches `version` (or LATEST) into plan_for(version, fresh)'s
        destination and returns the version delivered; `fresh` asks for a plan
        made from a describe() of that version."""
        version_arg(version)
        token = cancel if cancel is not None else Cancel()
        with self._ended:
            self._running, self._runner = token, threading.get_ident()
        try:
            return self._run(version, timeout, plan_for, on_done, progress, progress_interval, token)
        finally:
            with self._ended:
                self._running = self._runner = None
                self._ended.notify_all()

    def _run(self, version: int, timeout: float, plan_for: Callable[[int, bool], _Plan],
             on_done: Callable[[_Plan], None], progress: ProgressCallback | None,
             progress_interval: float | None, cancel: Cancel) -> int:
        deadline = time.monotonic() + timeout
        fresh = False
        layout_retries = 0
        newest = _NewestGone(version, deadline, self._what)
        while True:
            # Resolve once per attempt, then fetch that exact version: the
            # plan, the fetch and the digests all speak of the same one.
            target = newest.resolve(self._client, self.model)
            try:
                plan = plan_for(target, fresh)
            except VersionNotFound as e:
                newest.went(target, e, written=False)
                continue
            if plan is self._plan and self.version == target and self._replica is not None and \
                    not self._replica.released:
                # Held and served already: fetching it again would first give
                # it up, and a reader is never routed to its own copy.
                return target
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise newest.timed_out(Timeout(Timeout.code, f"no complete fetch of '{self.model}' within {timeout} s"))
            _synchronize(t for _, t in plan.pairs)
            # The destination is about to be overwritten: stop serving it.
            self.release()
            self.version = None
            self._plan = plan
            try:
                got, replica = self._fetch(target, plan, remaining, progress, progress_interval, cancel)
            except LayoutMismatch:
                # Checked before any byte is written: the plan is older than
                # the version's layout. Describe the version and check again.
                if fresh and layout_retries >= 2:
                    raise
                fresh, layout_retries = True, layout_retries + 1
                continue
            except VersionNotFound as e:
                # At its first plan, before any byte: a version being fetched
                # is required, and is not forgotten while its holders live.
                newest.went(target, e, written=False)
                continue
            except _TORN_ERRORS as e:
                newest.went(target, e, written=True)
                continue
            self._replica = replica
            if plan.digest is not None and self._verify:
                try:
                    _check_digests(self.model, got, [p for p in plan.pairs if p[0] != DIGEST_NAME], plan.digest,
                                   self._what)
                except DigestMismatch:
                    self.release()
                    raise
            on_done(plan)
            self.version = got
            return got

    def _fetch(self, version: int, plan: _Plan, remaining: float, progress: ProgressCallback | None,
               progress_interval: float | None, cancel: Cancel | None) -> tuple[int, Replica | None]:
        # Client.fetch_replica / fetch(serve=False), with the plan's views
        # and C array instead of new ones.
        hook = ProgressHook(progress, None if progress_interval is None else
                            to_ms(progress_interval, "progress_interval"))
        got, replica = self._client._fetch(self.model, version, plan.views, self.shard, remaining,
                                           serve=self._serve, hook=hook, c_tensors=plan.c_tensors, cancel=cancel)
        try:
            hook.raise_if_failed()
        except BaseException:
            if replica is not None:
                try:
                    replica.release()
                except TensorHubError:
                    pass  # Retained: the client keeps it and frees it on close()
            raise
        return got, replica


def _still_valid(plan: _Plan, local: list[tuple[str, torch.Tensor]], strict: bool) -> bool:
    """Whether the module still has the tensors `plan` writes into: same
    names, same storage (a parameter replaced by .to() or .data = ... is not)."""
    mine = dict(local)
    planned = [(n, t) for n, t in plan.pairs if n != DIGEST_NAME]
    if strict and len(mine) != len(planned):
        return False
    return all(n in mine and mine[n].data_ptr() == t.data_ptr() and mine[n].dtype == t.dtype and
               mine[n].shape == t.shape for n, t in planned)


def _match(desc: dict[str, Any], local: list[tuple[str, torch.Tensor]], aliases: dict[str, str], strict: bool,
           where: str) -> _Plan:
    """The destination of a described version in `local`, or LayoutMismatch
    listing every difference (names, dtypes, shapes)."""
    layout = _layout(desc)
    mine = dict(local)
    problems: list[str] = []
    pairs: list[tuple[str, torch.Tensor]] = []
    digest = _digest_buffer(layout)
    published = {name for name, _, _ in layout}
    for name, dtype_id, shape in layout:
        if name == DIGEST_NAME:
            assert digest is not None
            pairs.append((name, digest))
            continue
        dtype = DType(dtype_id)
        want = _spec(dtype.name.lower(), shape)
        t = mine.get(name)
        if t is None:
            if name in aliases:
                problems.append(f"'{name}' is published on its own, but the module ties it to '{aliases[name]}'")
            else:
                problems.append(f"'{name}' ({want}) is published but the module has no such tensor")
            continue
        if _BY_NAME.get(str(t.dtype).removeprefix("torch.")) != dtype or tuple(t.shape) != shape:
            problems.append(f"'{name}' is published as {want}, the module's is {_what(t)}")
            continue
        pairs.append((name, t))
    if strict:
        for name, t in local:
            if name not in published:
                hint = " (the publisher may tie it to another tensor)" if t.numel() else ""
                problems.append(f"the module's '{name}' ({_what(t)}) is not in the version{hint}")
    if problems:
        shown = "; ".join(problems[:8]) + (f"; and {len(problems) - 8} more" if len(problems) > 8 else "")
        raise LayoutMismatch(LayoutMismatch.code, f"{where}: {shown}; nothing was written")
    # Building the plan checks that every destination can be written in place
    # (contiguous, CPU or CUDA): InvalidArgument names the one that cannot.
    return _Plan(layout, pairs, digest)
