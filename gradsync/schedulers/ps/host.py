"""Parameter servers talk over gloo, from host memory (servers have no GPU; see
``gradsync/cluster/backends.py``). A worker on a GPU moves only what crosses to a server: what it
sends goes to the host first, and what it receives goes to its device after, into the tensors
that use it. Compression and error feedback stay on the device. On the CPU every move here is
the tensor itself, not a copy.

``pickled`` does the same for a compressor's context, whose tensors (selected indices, agreed
scales) stay on the worker's device otherwise and could not be unpickled on a server."""

from __future__ import annotations

import io
import pickle
from typing import Any

import torch
from torch import Tensor

from gradsync.cluster.group_devices import HOST
from gradsync.comm.host_sync import host_sync
from gradsync.schedulers.ps.config import HOST_STAGING


def to_host(tensor: Tensor) -> Tensor:
    """``tensor`` in host memory, contiguous, as gloo sends it. From a GPU the copy waits for
    the current stream (the communication thread's, which waited for the step's work): the
    servers' declared host synchronization."""
    with host_sync(HOST_STAGING):
        return tensor.detach().to(HOST).contiguous()


def host_empty(size: int | tuple[int, ...], dtype: torch.dtype) -> Tensor:
    """A receive buffer, in host memory where gloo writes."""
    return torch.empty(size, dtype=dtype, device=HOST)


def to_device(tensor: Tensor, device: torch.device) -> Tensor:
    """A received host tensor on ``device``, queued on the current stream without the host
    waiting for it (pageable memory is staged at once, so ``tensor`` may be dropped after)."""
    return tensor.to(device, non_blocking=True)


class _HostPickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, Tensor) and obj.device != HOST:
            return _as_is, (to_host(obj),)
        return NotImplemented  # everything else pickles as usual


def _as_is(tensor: Tensor) -> Tensor:
    return tensor


def pickled(obj: Any) -> bytes:
    """``pickle.dumps(obj)`` with every tensor inside it in host memory."""
    buffer = io.BytesIO()
    _HostPickler(buffer, protocol=pickle.DEFAULT_PROTOCOL).dump(obj)
    return buffer.getvalue()
