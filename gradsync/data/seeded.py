"""Random transforms that draw the same values wherever and whenever a sample is read.

torchvision's transforms draw from torch's global generator, so in loader processes what a
sample gets would depend on which process read it and what it read before. Here each position
of the epoch's order gets a seed, drawn from the epoch's generator after its permutation
(``ShardedBatchSampler.epoch_order``), and the sample is read with the global generator seeded
from it: a run draws the same augmentations with any number of loader processes, and a run
resumed in the middle of an epoch draws what the uninterrupted one drew.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import Dataset, Sampler

from gradsync.data.sharding import ShardedBatchSampler

SEED_BOUND = 2**62


class SeededSamples(Dataset[Any]):
    """``dataset[index]`` read as ``self[(index, seed)]``, under a generator seeded with
    ``seed``; the caller's own generator state is left as it was."""

    def __init__(self, dataset: Dataset[Any]) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, key: tuple[int, int]) -> Any:
        index, seed = key
        with torch.random.fork_rng(devices=[]):
            # The CPU generator only: torch.manual_seed would reseed CUDA's too, which the
            # training process (loader_workers=0) uses for its own draws.
            torch.random.default_generator.manual_seed(seed)
            return self.dataset[index]


class SeededBatches(Sampler[list[tuple[int, int]]]):
    """The batches of ``sampler``, each index paired with its position's seed."""

    def __init__(self, sampler: ShardedBatchSampler) -> None:
        self.sampler = sampler

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        order, generator = self.sampler.epoch_order()
        seeds = torch.randint(SEED_BOUND, (len(order),), generator=generator)
        indices = self.sampler.this_rank(order).tolist()
        for batch, batch_seeds in zip(indices, self.sampler.this_rank(seeds).tolist(), strict=True):
            yield list(zip(batch, batch_seeds, strict=True))
