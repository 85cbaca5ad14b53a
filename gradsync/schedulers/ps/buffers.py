"""Memory that a parameter server's traffic reuses step after step: what a push is received
into, what a worker's push and pull pass through on their way between its GPU and gloo. Fresh
host buffers of a model's size cost as much as the copies into them (the pages are new to the
process), so each one is made once, at its largest size, and handed out again as a view of the
size a step asks for."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import torch
from torch import Tensor

from gradsync.cluster.group_devices import HOST


class Buffers:
    """Grow-only buffers on ``device``, one per key. A view handed out is valid until the next
    ``get`` of the same key (which may write over it, or replace the buffer with a larger
    one). ``pinned``: page-locked host memory, for a GPU worker's side of the traffic: copies
    to and from its device are then asynchronous (a pageable copy makes the host wait, and is
    staged twice)."""

    def __init__(self, device: torch.device = HOST, *, pinned: bool = False) -> None:
        self.device, self.pinned = device, pinned
        self._bytes: dict[Hashable, Tensor] = {}

    def get(self, key: Hashable, shape: int | Sequence[int], dtype: torch.dtype) -> Tensor:
        """A tensor of ``shape`` and ``dtype`` over the buffer of ``key`` (its values are
        whatever the buffer held)."""
        dims = (shape,) if isinstance(shape, int) else tuple(shape)
        nbytes = math.prod(dims) * dtype.itemsize
        buffer = self._bytes.get(key)
        if buffer is None or buffer.numel() < nbytes:
            buffer = torch.empty(
                nbytes, dtype=torch.uint8, device=self.device, pin_memory=self.pinned
            )
            self._bytes[key] = buffer
        # From the buffer's start, which the allocator aligns for every type.
        return buffer[:nbytes].view(dtype).view(dims)
