"""The contract between the engine and every scheduler family, in the spirit of DDP's
communication hooks (a hook is given a bucket and returns a future of its result).

A family decides which elements travel together and when (its policy); when a bucket of them
is ready it hands it to ``SyncComponents.exchange`` with its ``Send``. The engine does what
every family shares: unscale (fp16), compensate with the error-feedback residual, compress,
and keep what was left out as the new residual. The family's ``Send`` then hands the payload
to the scheduler's one communication thread as its policy says, and returns the function that
waits for what came back. ``exchange`` returns that as an ``Exchanged``, the bucket's future:

- ``ExchangeEngine`` (allreduce, the pipelined family): an all-reduce at once (an all-gather
  when payloads do not add up); the future gives the sum, or every worker's payload;
- ``deft``: an all-reduce on the bucket's link; the sum;
- priority (bytescheduler, usbyte): a scheduling job, which starts the all-reduce once every
  rank has the bucket ready, in priority order, within the credit; the sum;
- parameter servers (ps_bsp, asp, ssp): a push of the shard to its server; the server's new
  values of the shard;
- ``osp``: a push of the important layers (RS), or of the others in the background (ICS);
  their new values, or their global change.

Turning what came back into the bucket's average is ``SyncComponents.combined`` (the servers
did it already for the parameter-server family). Gradient hooks go onto the model in one place
too (``hooks.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from torch import Tensor

from gradsync.types import GroupInfo, Payload

Received = Payload | list[Payload]
"""What a gradient's exchange gives back: the summed payload, or every worker's payload."""
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


@dataclass(frozen=True)
class Bucket:
    """What one exchange carries, as DDP's ``GradBucket``: the ``index``-th bucket of the step,
    its flat ``gradient`` (tensors in model order), and what its compressor is told of it."""

    index: int
    gradient: Tensor
    info: GroupInfo


class Send(Protocol[R_co]):
    """A family's policy for one compressed bucket: hand it to the communication thread and
    return the function that waits for what comes back (on CUDA, the caller's stream waits):
    ``Received`` where gradients are summed, a server's reply where one answers."""

    def __call__(self, bucket: Bucket, payload: Payload, ctx: Any) -> Callable[[], R_co]: ...


@dataclass(frozen=True)
class Exchanged(Generic[R]):
    """A bucket's exchange, in flight: DDP's future."""

    bucket: Bucket
    payload: Payload
    """What this worker sent."""
    ctx: Any
    """The compressor's context, which decompresses what comes back."""
    finish: Callable[[], R]

    def wait(self) -> R:
        """What came back (raises what the exchange raised)."""
        return self.finish()
