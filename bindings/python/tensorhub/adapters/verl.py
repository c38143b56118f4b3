"""verl: a checkpoint-engine backend on tensorhub.

verl's CheckpointEngineManager moves weights from the trainer's workers to
the rollout replicas' workers in one round per update: prepare() on every
worker, build_topology() once, init_process_group(**kwargs) on every worker,
then send_weights(generator) on the trainer workers while the rollout workers
run receive_weights() into their server adapter, and finalize() on all.

With this backend the round's version is fixed at build_topology (the
newest committed one + 1, as the first trainer worker saw it in prepare), the
trainer's rank 0 copies the generator's full tensors into buffers it owns
(they are usually gathered temporaries) and publishes them as that version,
and every rollout worker waits for it, fetches it from whichever process
already has it (the trainer or another rollout worker), checks it, and only
then yields its (name, tensor) pairs. Nothing has to be wired between the
workers: the topology is only "trainer rank 0 publishes, everyone else
reads", so replicas added later (add_replicas) need nothing either.
After finalize() the buffers keep serving, so that late readers do not have
to wait for the trainer's next round.

    # rollout config (verl >= 0.9 imports custom_backend_module before it
    # creates engines; importing this module registers the backend):
    checkpoint_engine.backend=tensorhub
    checkpoint_engine.custom_backend_module=tensorhub.adapters.verl
    checkpoint_engine.engine_kwargs.tensorhub.server_url=tcp://10.0.0.1:7070

The version of a round is max(global_steps, the newest committed version + 1),
the same on every worker: verl passes global_steps (the trainer's step) to
send_weights and receive_weights, and build_topology passes the other.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import AsyncGenerator, Iterable
from typing import Any

import torch

from .. import torch as tht
from .._common import LATEST
from .._errors import VersionNotFound
from ..cancel import Cancel
from ..client import Client

__all__ = ["BACKEND", "HAVE_VERL", "TensorHubCheckpointEngine", "register"]

BACKEND = "tensorhub"

try:
    from verl.checkpoint_engine.base import CheckpointEngine as _Base
    from verl.checkpoint_engine.base import CheckpointEngineRegistry as _Registry

    HAVE_VERL = True
except ImportError:
    HAVE_VERL = False
    _Base = object  # type: ignore[misc,assignment]
    _Registry = None


class TensorHubCheckpointEngine(_Base):  # type: ignore[misc,valid-type]
    """verl CheckpointEngine backend.

    Args:
        bucket_size: verl's transfer bucket size; unused (tensorhub moves
            whole versions in chunks of chunk_bytes), accepted because verl
            passes it to every backend.
        server_url: the tensorhub server.
        model: the model name versions are published under.
        device: where the trainer's published copy and the rollouts' staging
            buffers live ("cpu", or "cuda" with a CUDA-enabled library).
        timeout: seconds a rollout waits for and fetches one version.
        digest: publish (trainer) digests that rollouts verify.
    """

    def __init__(self, bucket_size: int = 0, server_url: str | None = None, model: str = "policy",
                 device: str = "cpu", timeout: float = 600.0, digest: bool = True, chunk_bytes: int = 4 << 20,
                 labels: dict[str, str] | None = None) -> None:
        if server_url is None:
            server_url = os.environ.get("TENSORHUB_SERVER")
        if not server_url:
            raise ValueError("tensorhub checkpoint engine: set engine_kwargs server_url (or $TENSORHUB_SERVER)")
        self.bucket_size = bucket_size
        self.server_url = server_url
        self.model = model
        self.device = device
        self.timeout = timeout
        self.digest = digest
        self.chunk_bytes = chunk_bytes
        self.labels = labels
        self.rank: int | None = None
        self.role: str | None = None
        self.round_version: int | None = None
        """The version this round moves (set by init_process_group)."""
        self._client: Client | None = None
        self._publisher: tht.StagedPublisher | None = None
        self._staging: tht.Staging | None = None
        self.version: int | None = None
        """The version this worker published (trainer) or received (rollout) last."""

    def _connect(self) -> Client:
        if self._client is None:
            host = socket.gethostname()
            self._client = Client(self.server_url, name=f"verl-{host}-{os.getpid()}",
                                  labels={"host": host, **(self.labels or {})})
        return self._client

    def prepare(self) -> dict[str, Any]:
        """Connects (once) and returns this worker's metadata, with the
        version the next round would publish."""
        client = self._connect()
        return {"worker_id": client.worker_id, "host": socket.gethostname(),
                "next_version": self._next_version(client)}

    @classmethod
    def build_topology(cls, trainer_world_size: int, rollout_world_size: int,
                       metadata: list[dict[str, Any]]) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
        """Trainer rank 0 publishes; every rollout worker reads. No wiring:
        each worker learns its rank, its role and the round's version (what
        the first trainer worker, metadata[0], would publish next)."""
        if len(metadata) != trainer_world_size + rollout_world_size or trainer_world_size < 1:
            raise ValueError(f"tensorhub checkpoint engine: {len(metadata)} workers prepared, "
                             f"{trainer_world_size} + {rollout_world_size} expected")
        version = int(metadata[0]["next_version"])
        trainer: dict[str, list[Any]] = {"rank": list(range(trainer_world_size)),
                                         "role": ["trainer"] * trainer_world_size,
                                         "version": [version] * trainer_world_size}
        rollout: dict[str, list[Any]] = {"rank": list(range(rollout_world_size)),
                                         "role": ["rollout"] * rollout_world_size,
                                         "version": [version] * rollout_world_size}
        return trainer, rollout

    def init_process_group(self, rank: int, role: str, version: int, **_: Any) -> None:
        """Records this worker's place ("trainer", 0 publishes) and the round's version."""
        if role not in ("trainer", "rollout"):
            raise ValueError(f"tensorhub checkpoint engine: role must be 'trainer' or 'rollout', got {role!r}")
        self.rank, self.role, self.round_version = rank, role, int(version)

    def _round(self, global_steps: int | None) -> int | None:
        if self.round_version is None and global_steps is None:
            return None
        return max(self.round_version or 0, global_steps or 0)

    async def send_weights(self, weights: Iterable[tuple[str, torch.Tensor]],
                           global_steps: int | None = None) -> dict[str, Any]:
        """Trainer workers: rank 0 copies the tensors and publishes them as the
        round's version; other ranks consume the generator (its gathers are
        collectives) and send nothing. Returns metrics for the trainer's log."""
        if self.role != "trainer":
            raise RuntimeError("tensorhub checkpoint engine: send_weights on a worker that is not a trainer "
                               "(init_process_group first)")
        if self.rank != 0:
            for _ in weights:
                pass
            return {}
        client = self._connect()
        if self._publisher is None:
            self._publisher = tht.StagedPublisher(client, self.model, device=self.device, digest=self.digest,
                                                  chunk_bytes=self.chunk_bytes)
        version = self._round(global_steps) or self._next_version(client)
        started = time.perf_counter()
        self._publisher.publish(version, weights)
        self.version = version
        return {"tensorhub/version": version, "tensorhub/publish_s": time.perf_counter() - started}

    def _next_version(self, client: Client) -> int:
        try:
            latest = client.resolve(self.model)
        except VersionNotFound:
            latest = 0
        return max(latest, self.version or 0) + 1

    async def receive_weights(self, global_steps: int | None = None
                              ) -> AsyncGenerator[tuple[str, torch.Tensor], None]:
        """Rollout workers: waits for the round's version (or a newer one),
        fetches the newest, checked, then yields its pairs. The tensors are
        staging buffers, valid until the next round."""
        if self.role != "rollout":
            raise RuntimeError("tensorhub checkpoint engine: receive_weights on a worker that is not a rollout "
                               "(init_process_group first)")
        client = self._connect()
        if self._staging is None:
            self._staging = tht.Staging(client, self.model, device=self.device)
        round_version = self._round(global_steps)
        newer_than = round_version - 1 if round_version else self.version or 0
        # A task canceled while awaiting a thread leaves the thread running:
        # the token ends its wait or fetch too, instead of letting it run on
        # for up to `timeout`.
        token = Cancel()
        try:
            await asyncio.to_thread(client.wait_for_version, self.model, newer_than, self.timeout, token)
            weights = await asyncio.to_thread(self._staging.fetch, LATEST, timeout=self.timeout, cancel=token)
        except asyncio.CancelledError:
            token.cancel()
            raise
        self.version = weights.version
        for name, tensor in weights:
            yield name, tensor

    def finalize(self) -> None:
        """Ends a round. The published copy (trainer) and the staging buffers
        (rollouts) keep serving the version until the next round."""

    def close(self) -> None:
        """Stops serving and disconnects."""
        for owner in (self._publisher, self._staging):
            if owner is not None:
                owner.close()
        self._publisher = self._staging = None
        if self._client is not None:
            self._client.close()
            self._client = None


def register() -> None:
    """Registers the backend with verl's CheckpointEngineRegistry as "tensorhub".

    Raises:
        ImportError: verl is not installed.
    """
    if _Registry is None:
        raise ImportError("verl is not installed")
    if _Registry._registry.get(BACKEND) is not TensorHubCheckpointEngine:
        _Registry.register(BACKEND)(TensorHubCheckpointEngine)


if HAVE_VERL:  # verl imports custom_backend_module so that it registers its backend
    register()
