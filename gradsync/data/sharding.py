"""Which samples each worker reads.

Every epoch all workers draw the same permutation (seeded by seed and epoch). Global batch j is
``perm[j*B*n : (j+1)*B*n]`` (B per-worker batch, n workers) and worker r takes the r-th slice of
it. Shards are disjoint, and n workers with batch B see exactly the samples one process with
batch n*B sees, in the same order: the property the equivalence tests rely on.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import Sampler


class ShardedBatchSampler(Sampler[list[int]]):
    def __init__(
        self,
        num_samples: int,
        *,
        batch_size: int,
        rank: int,
        world_size: int,
        seed: int,
    ) -> None:
        global_batch = batch_size * world_size
        if num_samples < global_batch:
            raise ValueError(
                f"the training set has {num_samples} samples, fewer than one global batch of "
                f"{global_batch} (trainer.batch_size × trainer.workers): lower either"
            )
        self.num_samples = num_samples
        self.batch_size = batch_size
        self.rank = rank
        self.world_size = world_size
        self.seed = seed
        self.epoch = 0
        self.skip = 0

    def set_epoch(self, epoch: int, *, skip_batches: int = 0) -> None:
        """Select the epoch's order; ``skip_batches`` resumes in the middle of an epoch."""
        self.epoch = epoch
        self.skip = skip_batches

    def __len__(self) -> int:
        return self.num_samples // (self.batch_size * self.world_size) - self.skip

    def __iter__(self) -> Iterator[list[int]]:
        gen = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        perm = torch.randperm(self.num_samples, generator=gen)
        global_batch = self.batch_size * self.world_size
        for j in range(self.skip, self.num_samples // global_batch):
            start = j * global_batch + self.rank * self.batch_size
            yield perm[start : start + self.batch_size].tolist()


def eval_shard(num_samples: int, *, rank: int, world_size: int) -> list[int]:
    """Indices of the evaluation set this worker scores (disjoint, together all of them)."""
    return list(range(rank, num_samples, world_size))
