"""PyTorch modules and state_dicts as tensorhub weight versions.

One class per place a model lives in an RL job:

- Publisher (trainer): publishes a module's parameters and persistent buffers
  *in place*: the replica's memory is the parameter storage, nothing is copied.
  Every in-place change of them (optimizer.step(), load_state_dict) must follow
  the mutability contract: attach the optimizer (publisher.attach(opt)) or wrap
  the change in ``with publisher.mutation():``.
- Receiver (rollout): fetches a version straight into a module's own parameter
  storage, then serves it to other readers. Names, dtypes and shapes are checked
  against the published layout before any byte is written.
- Staging (engines whose load path takes (name, tensor) pairs, such as vLLM's
  model.load_weights): a version lands complete, and verified when the publisher
  added digests, in buffers it owns; only then is it handed out as pairs.
- StagedPublisher (trainer): publishes tensors that do not live long enough to
  be published in place (FSDP full_tensor() results, a converted export) by
  copying them into buffers it owns.
- Prefetcher (rollout): fetches the next version into a spare set of tensors
  on a background thread while the module keeps the current one, in use and
  served; swap() makes it the module's, so the rollout's stall is the swap.
- ReshardingReceiver (rollout of another tensor-parallel degree): reads this
  rank's rows or columns of each tensor from the publisher's shards that
  hold them (ranged fetches: only those bytes move).

Digests: a publisher made with digest=True adds one tensor, DIGEST_NAME (uint8,
one 16-byte BLAKE2b row per tensor, over the model name, the version, the
tensor's name, dtype, shape and bytes). Receiver and Staging check it after
every fetch and raise DigestMismatch naming the tensors that differ, so an
update can be verified end to end, not only by the transport.

Tied weights (lm_head.weight and embed_tokens.weight sharing storage) are
published once, under the first name the state_dict gives; a receiver whose
module ties them the same way fills both.

Where each part lives: publisher.py (Publisher, StagedPublisher),
receiver.py (Receiver), staging.py (Staging, Weights), prefetch.py
(Prefetcher), reshard.py (ReshardingReceiver), digests.py; what the readers
share (plans, layout matching, the fetch-and-retry loop) is in _fetcher.py,
collecting a module's tensors in _collect.py.
"""

from __future__ import annotations

try:
    import torch  # noqa: F401 - a clear error here rather than in a submodule
except ImportError as e:  # pragma: no cover - exercised only without torch
    raise ImportError("tensorhub.torch needs PyTorch (pip install torch)") from e

from ._collect import Rename, Source, named_tensors  # noqa: F401 - Source, Rename: for annotations
from .digests import DIGEST_NAME, DigestMismatch, state_digests
from .prefetch import Prefetcher
from .publisher import Publisher, StagedPublisher
from .receiver import Receiver
from .reshard import ReshardingReceiver, Splits
from .staging import Staging, Weights

__all__ = ["Publisher", "StagedPublisher", "Receiver", "Staging", "Weights", "Prefetcher", "ReshardingReceiver",
           "Splits", "DigestMismatch", "DIGEST_NAME", "named_tensors", "state_digests"]
