"""vLLM: a weight-transfer engine backend and a worker extension on tensorhub.

vLLM updates a running engine's weights in four phases, driven by the trainer
through the engine's client (LLM / AsyncLLM / the HTTP routes):
init_weight_transfer_engine(init_info), start_weight_update(),
update_weights(update_info), finish_weight_update(weight_version). Each phase
runs on every worker, in the worker's WeightTransferEngine. With this backend
the trainer publishes a version to tensorhub and update_info carries only
{"version": v}: each worker fetches that version from whichever process holds
it (the trainer or another worker that already has it), checks it, and only
then hands it to model.load_weights. A worker that fails to fetch loads
nothing.

Worker side (in every vLLM process; the engine's own base classes are used
when vLLM is installed):

    from tensorhub.adapters import vllm as th_vllm
    th_vllm.register()                      # backend "tensorhub"
    # vllm serve ... --weight-transfer-config '{"backend": "tensorhub"}'

Trainer side:

    sender = th_vllm.TensorHubTrainerEngine.trainer_init(
        th_vllm.TensorHubTrainerInitInfo(server_url=url, model="policy", rank=0),
        client=llm_client, source=model)   # a Module (served in place) or (name, tensor) pairs
    ...
    sender.send_weights(version=step)      # publish + start / update / finish

For vLLM's older extension point, TensorHubWorkerExtension is a
worker_extension_cls: llm.collective_rpc("tensorhub_init", args=(url, "policy"))
then llm.collective_rpc("tensorhub_update", args=(version,)).

Weights travel in checkpoint format (the trainer's names, full tensors);
vLLM's load_weights maps names and takes each tensor-parallel rank's slice.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from .. import torch as tht
from .._common import LATEST
from ..client import Client

__all__ = ["BACKEND", "HAVE_VLLM", "TensorHubInitInfo", "TensorHubUpdateInfo", "TensorHubWeightTransferEngine",
           "TensorHubTrainerInitInfo", "TensorHubTrainerEngine", "TensorHubWorkerExtension", "register"]

BACKEND = "tensorhub"
"""The name the backend registers under (WeightTransferConfig.backend)."""

try:  # vLLM's own base classes, so that the engine is one of vLLM's engines
    from vllm.distributed.weight_transfer.base import WeightTransferEngine as _EngineBase
    from vllm.distributed.weight_transfer.base import WeightTransferInitInfo as _InitBase
    from vllm.distributed.weight_transfer.base import WeightTransferUpdateInfo as _UpdateBase

    HAVE_VLLM = True
except ImportError:
    HAVE_VLLM = False

    class _EngineBase:  # type: ignore[no-redef]
        """Stands in for vllm's WeightTransferEngine where vLLM is not installed."""

        def __init__(self, config: Any, vllm_config: Any, device: Any = None, model: Any = None) -> None:
            self.config = config
            self.vllm_config = vllm_config
            self.device = device
            self.model = model

    @dataclass
    class _InitBase:  # type: ignore[no-redef]
        pass

    @dataclass
    class _UpdateBase:  # type: ignore[no-redef]
        pass


@dataclass
class TensorHubInitInfo(_InitBase):
    """What init_weight_transfer_engine(init_info) carries to every worker."""

    server_url: str
    """The tensorhub server (or comma-separated list of servers)."""
    model: str = "policy"
    """The model name the trainer publishes under."""
    shard: int = 0
    """The shard every worker loads (the trainer publishes full tensors as shard 0 of 1)."""
    staging_device: str = "cpu"
    """Where a version lands before load_weights copies it into the parameters."""
    timeout: float = 300.0
    """Seconds one update may take."""
    labels: dict[str, str] | None = None
    """Topology labels of the workers (e.g. {"dc": "eu", "host": ...}); the host is added."""
    verify: bool = True
    """Check the publisher's digests, when it published them."""


@dataclass
class TensorHubUpdateInfo(_UpdateBase):
    """What update_weights(update_info) carries: the version to load."""

    version: int = LATEST
    """A version number, or tensorhub.LATEST for the newest committed one."""


class TensorHubWeightTransferEngine(_EngineBase):  # type: ignore[misc,valid-type]
    """vLLM WeightTransferEngine backend: fetches a tensorhub version into
    staging buffers, complete and verified, then calls model.load_weights.

    The staging buffers stay registered and serve the version to the other
    workers and late joiners until the next update replaces it.
    """

    init_info_cls = TensorHubInitInfo
    update_info_cls = TensorHubUpdateInfo
    supports_draft_weight_update = False

    def __init__(self, config: Any, vllm_config: Any, device: Any = None, model: Any = None) -> None:
        if model is None and device is None:  # vLLM before the engine owned the model: (config, parallel_config)
            super().__init__(config, vllm_config)
        else:
            super().__init__(config, vllm_config, device, model)
        self._client: Client | None = None
        self._staging: tht.Staging | None = None
        self._info: TensorHubInitInfo | None = None
        self._reload: tuple[Callable[..., Any], Callable[..., Any]] | None = None
        self._loaded: int | None = None
        self.weight_version: int | None = None
        """The version the model holds (set by finish_weight_update)."""

    if not HAVE_VLLM:
        def parse_init_info(self, init_dict: dict[str, Any]) -> TensorHubInitInfo:
            try:
                return TensorHubInitInfo(**init_dict)
            except TypeError as e:
                raise ValueError(f"Invalid init_info for {type(self).__name__}: {e}") from e

        def parse_update_info(self, update_dict: dict[str, Any]) -> TensorHubUpdateInfo:
            try:
                return TensorHubUpdateInfo(**update_dict)
            except TypeError as e:
                raise ValueError(f"Invalid update_info for {type(self).__name__}: {e}") from e

        def update_weights(self, update_info: dict[str, Any]) -> None:
            self.receive_weights(self.parse_update_info(update_info))

    def init_transfer_engine(self, init_info: TensorHubInitInfo) -> None:
        """Connects this worker to tensorhub (once; called again, it reconnects)."""
        self.shutdown()
        labels = {"host": socket.gethostname(), **(init_info.labels or {})}
        self._client = Client(init_info.server_url, name=f"vllm-{socket.gethostname()}-{os.getpid()}",
                              labels=labels)
        self._staging = tht.Staging(self._client, init_info.model, shard=init_info.shard,
                                    device=init_info.staging_device, verify=init_info.verify)
        self._info = init_info

    def start_weight_update(self, is_checkpoint_format: bool = True) -> None:
        """Opens an update. Weights in checkpoint format go through vLLM's
        layerwise reload when this vLLM has it, as its own checkpoint-format
        engines do."""
        self._loaded = None
        self._reload = _layerwise_reload() if is_checkpoint_format else None
        if self._reload is not None and self.model is not None:
            self._reload[0](self.model)

    def receive_weights(self, update_info: TensorHubUpdateInfo,
                        load_weights: Callable[[list[tuple[str, torch.Tensor]]], Any] | None = None) -> None:
        """Fetches update_info.version and loads it. `load_weights` is the
        loader older vLLM passes; newer vLLM gives the engine the model."""
        if self._staging is None or self._info is None:
            raise RuntimeError("tensorhub weight transfer: update_weights before init_weight_transfer_engine")
        weights = self._staging.fetch(update_info.version, timeout=self._info.timeout)
        pairs = list(weights)
        if load_weights is not None:
            load_weights(pairs)
        elif self.model is not None:
            self.model.load_weights(weights=pairs)
        else:
            raise RuntimeError("tensorhub weight transfer: no model and no load_weights callable to load into")
        self._loaded = weights.version

    def finish_weight_update(self, weight_version: Any = None) -> None:
        """Closes the update: finalises vLLM's layerwise reload, records the version."""
        if self._reload is not None and self.model is not None:
            self._reload[1](self.model, getattr(self, "model_config", None))
        self._reload = None
        if self._loaded is not None:
            self.weight_version = self._loaded

    def shutdown(self) -> None:
        """Stops serving and disconnects. Idempotent."""
        if self._staging is not None:
            self._staging.close()
            self._staging = None
        if self._client is not None:
            self._client.close()
            self._client = None


def _layerwise_reload() -> tuple[Callable[..., Any], Callable[..., Any]] | None:
    try:
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload, initialize_layerwise_reload
    except ImportError:
        return None
    return initialize_layerwise_reload, finalize_layerwise_reload


def register() -> None:
    """Registers the worker-side backend with vLLM's WeightTransferEngineFactory
    as "tensorhub" (lazily imported, in every process that creates engines).

    Raises:
        ImportError: vLLM is not installed.
    """
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory

    if BACKEND not in getattr(WeightTransferEngineFactory, "_registry", {}):
        WeightTransferEngineFactory.register_engine(BACKEND, __name__, "TensorHubWeightTransferEngine")


# --------------------------------------------------------------------------- #
# Trainer side
# --------------------------------------------------------------------------- #


@dataclass
class TensorHubTrainerInitInfo:
    """How the trainer reaches tensorhub and what it tells the workers."""

    server_url: str
    model: str = "policy"
    rank: int = field(default=0, kw_only=True)
    """This trainer process's rank: rank 0 publishes and drives the workers."""
    digest: bool = True
    """Publish digests, so that every worker verifies every byte."""
    chunk_bytes: int = 4 << 20
    staging_device: str = "cpu"
    """Workers' staging buffers (sent in the init info)."""
    timeout: float = 300.0
    labels: dict[str, str] | None = None


class TensorHubTrainerEngine:
    """Trainer side: publishes each version and drives a vLLM weight-sync
    client (anything with vLLM's four methods: init_weight_transfer_engine,
    start_weight_update, update_weights, finish_weight_update).

    `source` is either a torch.nn.Module, published in place (attach the
    optimizer with attach(optimizer) so that steps withdraw the served
    version first), or something iterable of (name, tensor) pairs, new each
    round (vLLM's WeightSource, FSDP full_tensor() gathers), copied into
    buffers this engine owns. Every trainer rank iterates an iterable
    source (gathers are collectives); only rank 0 publishes and calls the client.
    """

    def __init__(self, info: TensorHubTrainerInitInfo, *, client: Any, source: Any) -> None:
        self.info = info
        self.client = client
        self.source = source
        self.is_sender = info.rank == 0
        self._hub: Client | None = None
        self._publisher: tht.Publisher | tht.StagedPublisher | None = None
        self.version: int | None = None
        """The last version sent."""
        if self.is_sender:
            self._hub = Client(info.server_url, name=f"trainer-{socket.gethostname()}-{os.getpid()}",
                               labels={"host": socket.gethostname(), **(info.labels or {})})
            if isinstance(source, (torch.nn.Module, Mapping)):
                self._publisher = tht.Publisher(self._hub, info.model, source, digest=info.digest,
                                                chunk_bytes=info.chunk_bytes)
            else:
                self._publisher = tht.StagedPublisher(self._hub, info.model, digest=info.digest,
                                                      chunk_bytes=info.chunk_bytes)

    @classmethod
    def trainer_init(cls, init_info: TensorHubTrainerInitInfo, *, client: Any, source: Any = None
                     ) -> TensorHubTrainerEngine:
        """Connects to tensorhub and initialises the workers' engines (rank 0)."""
        if source is None:
            raise ValueError("tensorhub trainer engine: pass source= (a module, or (name, tensor) pairs)")
        engine = cls(init_info, client=client, source=source)
        if engine.is_sender:
            client.init_weight_transfer_engine({"server_url": init_info.server_url, "model": init_info.model,
                                                "staging_device": init_info.staging_device,
                                                "timeout": init_info.timeout})
        return engine

    def attach(self, optimizer: torch.optim.Optimizer) -> Any:
        """For a Module source: withdraw the served version before each optimizer.step()."""
        if isinstance(self._publisher, tht.Publisher):
            return self._publisher.attach(optimizer)
        return None

    def send_weights(self, version: int | None = None) -> int | None:
        """Publishes the source as `version` (default: the last one + 1) and
        runs start_weight_update, update_weights, finish_weight_update on the
        workers. Returns the version on rank 0, None elsewhere."""
        if not self.is_sender:
            if not isinstance(self.source, (torch.nn.Module, Mapping)):
                for _ in _pairs(self.source):  # keep the gathers' collectives in step with rank 0
                    pass
            return None
        assert self._hub is not None and self._publisher is not None
        if version is None:
            version = (self.version or 0) + 1
        if isinstance(self._publisher, tht.Publisher):
            self._publisher.publish(version)
        else:
            self._publisher.publish(version, _pairs(self.source))
        self.client.start_weight_update()
        self.client.update_weights({"version": version})
        self.client.finish_weight_update(weight_version=str(version))
        self.version = version
        return version

    def shutdown(self) -> None:
        """Withdraws what is served and disconnects."""
        if self._publisher is not None:
            self._publisher.close()
            self._publisher = None
        if self._hub is not None:
            self._hub.close()
            self._hub = None


def _pairs(source: Any) -> Iterable[tuple[str, torch.Tensor]]:
    make = callable(source) and not hasattr(source, "__iter__")
    pairs: Iterable[tuple[str, torch.Tensor]] = source() if make else source
    return pairs


# --------------------------------------------------------------------------- #
# Worker extension (collective_rpc)
# --------------------------------------------------------------------------- #


class TensorHubWorkerExtension:
    """A vLLM worker_extension_cls: its methods run on every worker through
    llm.collective_rpc(name, args=...). The worker provides
    self.model_runner.model (the model, with load_weights).

        llm = LLM(model=..., worker_extension_cls="tensorhub.adapters.vllm.TensorHubWorkerExtension")
        llm.collective_rpc("tensorhub_init", args=(server_url, "policy"))
        llm.collective_rpc("tensorhub_update", args=(version,))   # -> [version, ...] per worker
    """

    # Set by tensorhub_init; vLLM makes the worker, so there is no __init__ of ours.
    _th_client: Client | None
    _th_staging: tht.Staging | None
    _th_timeout: float
    _th_version: int | None

    def tensorhub_init(self, server_url: str, model: str = "policy", staging_device: str = "cpu",
                       timeout: float = 300.0) -> None:
        """Connects this worker to tensorhub."""
        self.tensorhub_close()
        self._th_client = Client(server_url, name=f"vllm-{socket.gethostname()}-{os.getpid()}",
                                 labels={"host": socket.gethostname()})
        self._th_staging = tht.Staging(self._th_client, model, device=staging_device)
        self._th_timeout = timeout
        self._th_version: int | None = None

    def tensorhub_update(self, version: int = LATEST) -> int:
        """Fetches `version` (default: the newest), complete and verified, then
        loads it with model.load_weights. Returns the version loaded."""
        staging: tht.Staging | None = getattr(self, "_th_staging", None)
        if staging is None:
            raise RuntimeError("tensorhub_update before tensorhub_init")
        weights = staging.fetch(version, timeout=self._th_timeout)
        self.model_runner.model.load_weights(weights=list(weights))  # type: ignore[attr-defined]
        self._th_version = weights.version
        return weights.version

    def tensorhub_version(self) -> int | None:
        """The version this worker loaded last (None before any)."""
        return getattr(self, "_th_version", None)

    def tensorhub_close(self) -> None:
        """Stops serving and disconnects. Idempotent."""
        staging = getattr(self, "_th_staging", None)
        if staging is not None:
            staging.close()
            self._th_staging = None
        client = getattr(self, "_th_client", None)
        if client is not None:
            client.close()
            self._th_client = None
