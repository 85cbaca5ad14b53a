"""``compressor=randomk``: k random elements, the same on every worker, so values all-reduce.

Indices come from a generator seeded by (seed, step, group name) and never from the worker's
rank: every worker draws the same set without communicating.
"""

from __future__ import annotations

import torch
from torch import Tensor
from typing_extensions import Unpack

from gradsync.compressors.device_copy import on_device
from gradsync.compressors.seeding import seeded_generator
from gradsync.compressors.sparse import AgreedIndexCompressor
from gradsync.compressors.warmup import WarmupArgs


class RandomKCompressor(AgreedIndexCompressor):
    def __init__(self, *, density: float, seed: int = 0, **warmup: Unpack[WarmupArgs]) -> None:
        super().__init__(density=density, **warmup)
        self.seed = seed

    def agree(self, flat: Tensor, *, name: str, step: int, sizes: list[int], k: int) -> Tensor:
        # Drawn on the host (the same draws on every device), copied without waiting.
        gen = seeded_generator(self.seed, step, name, device=torch.device("cpu"))
        return on_device(random_subset(flat.numel(), k, gen), torch.int64, flat.device)


def random_subset(n: int, k: int, gen: torch.Generator) -> Tensor:
    """k distinct indices in [0, n), uniformly among all k-subsets, in O(k log k) rather than
    the O(n) of a full permutation (which dominated the step for large models).

    Draws with replacement until at least k distinct values are in hand; given its size, that
    set is a uniform random subset, so k of it taken by a random permutation are too."""
    if 2 * k > n:
        return torch.randperm(n, generator=gen)[:k]
    distinct = torch.empty(0, dtype=torch.int64)
    while distinct.numel() < k:
        draws = torch.randint(n, (k + k // 8 + 16,), generator=gen)
        distinct = torch.unique(torch.cat([distinct, draws]))
    return distinct[torch.randperm(distinct.numel(), generator=gen)[:k]]
