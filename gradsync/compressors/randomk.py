"""``compressor=randomk``: k random elements, the same on every worker, so values all-reduce.

Indices come from a generator seeded by (seed, step, tensor name) and never from the worker's
rank: every worker draws the same set without communicating.
"""

from __future__ import annotations

import zlib
from typing import Any, ClassVar

import torch
from torch import Tensor

from gradsync.types import Payload


class RandomKCompressor:
    allreducible: ClassVar[bool] = True
    lossless: ClassVar[bool] = False

    def __init__(self, *, density: float, seed: int = 0) -> None:
        self.density = density
        self.seed = seed

    def _indices(self, numel: int, *, name: str, step: int, device: torch.device) -> Tensor:
        k = max(1, int(self.density * numel))
        gen = torch.Generator(device="cpu")
        # Plain integer mixing (not hash()) so every process derives the same seed.
        mixed = self.seed * 0x9E3779B1 + step * 0x85EBCA77 + zlib.crc32(name.encode())
        gen.manual_seed(mixed % (1 << 63))
        return torch.randperm(numel, generator=gen)[:k].to(device)

    def compress(self, grad: Tensor, *, name: str, step: int) -> tuple[Payload, Any]:
        flat = grad.reshape(-1)
        indices = self._indices(flat.numel(), name=name, step=step, device=flat.device)
        return (flat[indices].clone(),), (indices, grad.shape)

    def decompress(self, payload: Payload, ctx: Any) -> Tensor:
        indices, shape = ctx
        (values,) = payload
        dense = values.new_zeros(shape.numel())
        dense[indices] = values
        return dense.view(shape)

    def selected(self, payload: Payload, ctx: Any) -> Tensor | None:
        return ctx[0]
