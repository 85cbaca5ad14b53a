"""Buffers a compressor reuses from call to call: on a CPU, filling fresh pages costs as much as
the work on them. Scratch is never state: it is written before it is read, and never part of a
payload."""

from __future__ import annotations

import torch
from torch import Tensor


class Scratch:
    def __init__(self) -> None:
        self._buffers: dict[str, Tensor] = {}

    def get(self, name: str, numel: int, like: Tensor, dtype: torch.dtype | None = None) -> Tensor:
        """``numel`` elements of the buffer ``name``, on ``like``'s device and of ``dtype``
        (``like``'s by default); grown, never shrunk."""
        dtype = like.dtype if dtype is None else dtype
        buffer = self._buffers.get(name)
        if (
            buffer is None
            or buffer.numel() < numel
            or (buffer.dtype, buffer.device) != (dtype, like.device)
        ):
            buffer = self._buffers[name] = torch.empty(numel, dtype=dtype, device=like.device)
        return buffer[:numel]
