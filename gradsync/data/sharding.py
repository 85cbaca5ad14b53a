"""Which samples each worker reads.

Every epoch all workers draw the same permutation (seeded by seed and epoch). Global batch j is
``perm[j*B*n : (j+1)*B*n]`` (B per-worker batch, n workers) and worker r takes the r-th slice of
it. Shards are disjoint, and n workers with batch B see exactly the samples one process with
batch n*B sees, in the same order: the property the equivalence tests rely on.

The epoch's generator goes on, after the permutation, to draw what is random about each
position of the order (augmentations): every worker draws the same values and takes its own
positions', so a sample's augmentation depends on the seed, the epoch and its position alone,
never on the worker count or on where a resumed run started.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor
from torch.utils.data import Sampler

from gradsync.config.checks import SettingError, too_few_samples


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
        problem = too_few_samples(num_samples, batch_size=batch_size, workers=world_size)
        if problem is not None:
            raise SettingError(problem)
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
        return self.batches_per_epoch - self.skip

    @property
    def batches_per_epoch(self) -> int:
        return self.num_samples // (self.batch_size * self.world_size)

    def epoch_order(self) -> tuple[Tensor, torch.Generator]:
        """The epoch's permutation, and its generator, left ready for per-position draws."""
        generator = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        return torch.randperm(self.num_samples, generator=generator), generator

    def this_rank(self, per_position: Tensor) -> Tensor:
        """This worker's rows of a tensor with one row per position of the epoch's order, as
        (batches left in the epoch, batch_size, ...), the first being batch ``skip``'s."""
        steps = self.batches_per_epoch
        shaped = per_position[: steps * self.batch_size * self.world_size].view(
            steps, self.world_size, self.batch_size, *per_position.shape[1:]
        )
        return shaped[self.skip :, self.rank]

    def __iter__(self) -> Iterator[list[int]]:
        order, _ = self.epoch_order()
        for batch in self.this_rank(order):
            yield batch.tolist()


def eval_shard(num_samples: int, *, rank: int, world_size: int) -> list[int]:
    """Indices of the evaluation set this worker scores (disjoint, together all of them)."""
    return list(range(rank, num_samples, world_size))
