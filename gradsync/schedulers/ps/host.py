"""Parameter servers talk over gloo, from host memory (servers have no GPU; see
``gradsync/cluster/backends.py``). A worker on a GPU moves only what crosses to a server: what it
sends goes to the host first, and what it receives goes to its device after, into the tensors
that use it. Compression and error feedback stay on the device. On the CPU every move here is
the tensor itself, not a copy.

``Staging`` is that crossing on a worker: persistent pinned buffers on the host and on the
device (``buffers.py``), copies queued on the current stream (the communication thread's) and
ordered by events, so that the host waits only where gloo must read what a copy wrote, and
before gloo writes where a copy still reads.

``pickled`` does the same for a compressor's context, whose tensors (selected indices, agreed
scales) stay on the worker's device otherwise and could not be unpickled on a server."""

from __future__ import annotations

import io
import pickle
from collections.abc import Hashable
from typing import Any

import torch
from torch import Tensor

from gradsync.cluster.group_devices import HOST
from gradsync.comm.host_sync import host_sync
from gradsync.schedulers.ps.buffers import Buffers
from gradsync.schedulers.ps.config import HOST_STAGING
from gradsync.types import Payload


class Staging:
    """A worker's tensors on their way to and from the servers, each way under a key of its
    own (a shard's push, a reply): the buffers of a key are made once and reused every step."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._gpu = device.type == "cuda"
        self._host = Buffers(pinned=self._gpu)
        self._device = Buffers(device)
        self._copying: dict[Hashable, torch.cuda.Event] = {}
        """The copy to the device still reading a key's host buffer."""

    def outgoing(self, key: Hashable, payload: Payload) -> Payload:
        """``payload`` in host memory, contiguous, for gloo to send: on a GPU copied into the
        pinned buffers of ``key`` (valid until its next ``outgoing``) once the current
        stream's work before it is done. Only this thread waits, for the copies' event: the
        servers' declared host synchronization, passed on the CPU too (where nothing waits), so
        that a CPU run reaches the points a GPU run does."""
        copied: torch.cuda.Event | None = None
        if self._gpu:
            staged = tuple(
                self._host.get((key, i), t.shape, t.dtype).copy_(t, non_blocking=True)
                for i, t in enumerate(payload)
            )
            copied = torch.cuda.Event()
            copied.record()
        else:
            staged = tuple(t.detach().contiguous() for t in payload)
        with host_sync(HOST_STAGING):
            if copied is not None:
                copied.synchronize()
        return staged

    def landing(self, key: Hashable, numel: int, dtype: torch.dtype) -> Tensor:
        """Host memory for gloo to receive ``key`` into, valid until its next ``landing``: on a
        GPU once the copy that ``arrived`` made from it last time has read it."""
        copying = self._copying.pop(key, None)
        if copying is not None:  # long done: a step has passed since
            with host_sync(HOST_STAGING):
                copying.synchronize()
        return self._host.get(key, numel, dtype)

    def arrived(self, key: Hashable, received: Tensor) -> Tensor:
        """``received`` (a view of ``key``'s landing) on the worker's device: on the CPU
        itself; on a GPU in the device buffer of ``key`` (valid until its next ``arrived``),
        copied on the current stream without the host waiting."""
        if not self._gpu:
            return received
        moved = self._device.get(key, received.shape, received.dtype)
        moved.copy_(received, non_blocking=True)
        self._copying[key] = torch.cuda.Event()
        self._copying[key].record()
        return moved


def to_host(tensor: Tensor) -> Tensor:
    """``tensor`` in host memory, contiguous, as gloo sends it (a small one: a context's). From
    a GPU the copy waits for the current stream: the servers' declared host synchronization."""
    with host_sync(HOST_STAGING):
        return tensor.detach().to(HOST).contiguous()


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
