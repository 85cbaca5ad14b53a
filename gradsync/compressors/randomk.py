"""``compressor=randomk``: k random elements, the same on every worker, so values all-reduce.

Indices come from a generator seeded by (seed, step, group name) and never from the worker's
rank: every worker draws the same set without communicating.
"""

from __future__ import annotations

import zlib

import torch
from torch import Tensor

from gradsync.compressors.sparse import AgreedIndexCompressor, density_k


class RandomKCompressor(AgreedIndexCompressor):
    def __init__(self, *, density: float, seed: int = 0) -> None:
        super().__init__()
        self.density = density
        self.seed = seed

    def agree(self, flat: Tensor, *, name: str, step: int, sizes: list[int]) -> Tensor:
        gen = torch.Generator(device="cpu")
        # Plain integer mixing (not hash()) so every process derives the same seed.
        mixed = self.seed * 0x9E3779B1 + step * 0x85EBCA77 + zlib.crc32(name.encode())
        gen.manual_seed(mixed % (1 << 63))
        k = density_k(self.density, flat.numel())
        return torch.randperm(flat.numel(), generator=gen)[:k].to(flat.device)
