"""What the training loop iterates: each epoch's batches of this worker and its evaluation
batches, already on the worker's device.

A split held in memory (``memory.InMemorySplit``) is moved to the device once. Each epoch the
worker's positions of the order (``sharding.py``) and their augmentation draws go there in one
copy, and every step takes a slice of them and cuts its batch from the split there: nothing
per sample, no host sync. Any other dataset (read from disk) is read by ``loader_workers``
DataLoader processes into pinned memory, its augmentation seeded per position (``seeded.py``),
and each batch is copied to the device on a side stream while the step before it runs
(``prefetch.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Subset

from gradsync.data.memory import InMemorySplit
from gradsync.data.prefetch import on_device
from gradsync.data.seeded import SeededBatches, SeededSamples
from gradsync.data.sharding import ShardedBatchSampler, eval_shard
from gradsync.data.spec import DataSplits

Batch = tuple[Tensor, ...]


class TrainFeed(Protocol):
    def epoch(self, epoch: int, *, skip: int) -> Iterator[Batch]:
        """The batches of ``epoch`` this worker trains on, from batch ``skip`` on."""
        ...


@dataclass(frozen=True)
class Feeds:
    train: TrainFeed
    evaluation: Iterable[Batch]
    in_memory: bool
    """Whether the data is held in memory (no loader processes)."""


def make_feeds(
    data: DataSplits,
    *,
    device: torch.device,
    batch_size: int,
    eval_batch_size: int,
    rank: int,
    workers: int,
    seed: int,
    loader_workers: int,
) -> Feeds:
    """``loader_workers`` is used for a dataset read from disk only."""
    train_size = len(data.train)  # type: ignore[arg-type]
    sampler = ShardedBatchSampler(
        train_size, batch_size=batch_size, rank=rank, world_size=workers, seed=seed
    )
    if isinstance(data.train, InMemorySplit) and isinstance(data.test, InMemorySplit):
        test = data.test.to(device)
        return Feeds(
            train=InMemoryTrainFeed(data.train.to(device), sampler),
            evaluation=InMemoryEval(
                test, torch.arange(rank, len(test), workers, device=device), eval_batch_size
            ),
            in_memory=True,
        )
    options: dict[str, Any] = {
        "num_workers": loader_workers,
        "pin_memory": device.type == "cuda",
        "persistent_workers": loader_workers > 0,
    }
    eval_indices = eval_shard(len(data.test), rank=rank, world_size=workers)  # type: ignore[arg-type]
    return Feeds(
        train=LoaderTrainFeed(data.train, sampler, device=device, options=options),
        evaluation=LoaderEval(
            DataLoader(Subset(data.test, eval_indices), batch_size=eval_batch_size, **options),
            device,
        ),
        in_memory=False,
    )


def to_device(tensor: Tensor, device: torch.device) -> Tensor:
    """A copy that does not make the host wait for the device: staged in pinned memory."""
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.contiguous().pin_memory().to(device, non_blocking=True)


class InMemoryTrainFeed:
    def __init__(self, split: InMemorySplit, sampler: ShardedBatchSampler) -> None:
        self.split = split
        self.sampler = sampler

    def epoch(self, epoch: int, *, skip: int) -> Iterator[Batch]:
        self.sampler.set_epoch(epoch, skip_batches=skip)
        order, generator = self.sampler.epoch_order()
        device = self.split.device
        rows = to_device(self.sampler.this_rank(order), device)
        # Drawn for every position of the order (all workers'), so a sample's draw is its
        # position's, whatever the worker count or the batch a resumed run starts at.
        drawn = self.split.draw(len(order), generator)
        draws = None if drawn is None else to_device(self.sampler.this_rank(drawn), device)
        for j in range(len(rows)):
            yield self.split.batch(rows[j], None if draws is None else draws[j])


class InMemoryEval:
    """The evaluation batches of the samples at ``indices`` (on the split's device)."""

    def __init__(self, split: InMemorySplit, indices: Tensor, batch_size: int) -> None:
        self.split = split
        self.indices = indices
        self.batch_size = batch_size

    def __iter__(self) -> Iterator[Batch]:
        for start in range(0, len(self.indices), self.batch_size):
            yield self.split.batch(self.indices[start : start + self.batch_size])


class LoaderTrainFeed:
    def __init__(
        self,
        dataset: Dataset[Any],
        sampler: ShardedBatchSampler,
        *,
        device: torch.device,
        options: dict[str, Any],
    ) -> None:
        self.sampler = sampler
        self.device = device
        self.loader = DataLoader(
            SeededSamples(dataset), batch_sampler=SeededBatches(sampler), **options
        )

    def epoch(self, epoch: int, *, skip: int) -> Iterator[Batch]:
        self.sampler.set_epoch(epoch, skip_batches=skip)
        return on_device(self.loader, self.device)


class LoaderEval:
    def __init__(self, loader: DataLoader[Any], device: torch.device) -> None:
        self.loader = loader
        self.device = device

    def __iter__(self) -> Iterator[Batch]:
        return on_device(self.loader, self.device)
