"""Without augmentation, the batches a worker trains and evaluates on, cut from splits held in
memory, equal bit for bit those of the per-sample path they replace: a DataLoader over the
dataset (torchvision's ToTensor and Normalize for the image files) with the sharded sampler,
and over the worker's evaluation shard."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, Subset, TensorDataset
from torchvision.datasets import MNIST, FashionMNIST

from gradsync.config.instantiate import build
from gradsync.data import transforms
from gradsync.data.cifar import Cifar10
from gradsync.data.memory import InMemorySplit
from gradsync.data.sharding import ShardedBatchSampler, eval_shard
from gradsync.data.spec import DataSplits
from gradsync.data.stats import (
    CIFAR10_STATS,
    FASHION_MNIST_STATS,
    MNIST_STATS,
    Stats,
)
from gradsync.jobs.compose import compose_jobs
from tests.helpers.datagen.images import write_cifar10, write_mnist
from tests.helpers.datagen.movielens import write_movielens
from tests.helpers.datagen.text import GENERATORS as TEXT_GENERATORS
from tests.helpers.feeds import feeds_of

WORKERS, BATCH, EVAL_BATCH, SEED = 2, 3, 4, 5

# Per option: the files it reads (None: none), and the per-sample datasets of today's path,
# (train, test), built from the files or from the loaded splits' own tensors.
References = Callable[[Path, DataSplits], tuple[Dataset[Any], Dataset[Any]]]


def _torchvision(kind: Any, stats: Stats) -> References:
    def splits(root: Path, _: DataSplits) -> tuple[Dataset[Any], Dataset[Any]]:
        transform = transforms.to_normalized_tensor(stats)
        return tuple(  # type: ignore[return-value]
            kind(str(root), train=train, transform=transform) for train in (True, False)
        )

    return splits


def _rows(_: Path, data: DataSplits) -> tuple[Dataset[Any], Dataset[Any]]:
    """Today's TensorDataset over the same tensors (digits, movielens)."""
    return TensorDataset(*data.train.tensors), TensorDataset(*data.test.tensors)  # type: ignore[attr-defined]


def _windows(_: Path, data: DataSplits) -> tuple[Dataset[Any], Dataset[Any]]:
    """Token windows read one by one, slicing the stream (today's ``TokenWindows[i]``)."""
    return data.train, data.test


CASES: dict[str, tuple[Callable[[Path], list[str]] | None, References]] = {
    "cifar10": (write_cifar10, _torchvision(Cifar10.unchecked, CIFAR10_STATS)),
    "mnist": (write_mnist, _torchvision(MNIST, MNIST_STATS)),
    "fashion_mnist": (
        lambda root: write_mnist(root, "FashionMNIST"),
        _torchvision(FashionMNIST, FASHION_MNIST_STATS),
    ),
    "digits": (None, _rows),
    "wikitext2": (TEXT_GENERATORS["wikitext2"], _windows),
    "movielens": (write_movielens, _rows),
}


# What else a job on the option needs: a model of its task; no augmentation.
SETTINGS = {
    "cifar10": ["dataset.augment=false"],
    "wikitext2": ["model=lstm"],
    "movielens": ["model=ncf"],
}


def _load(option: str, root: Path) -> DataSplits:
    write, _ = CASES[option]
    overrides = [] if write is None else write(root)
    job = [f"dataset={option}", *overrides, *SETTINGS.get(option, [])]
    cfg = compose_jobs(job, multirun=False, launcher_here=False)[0]  # loaded, not launched
    return build(cfg.dataset, path="dataset").load()


def _today_train(dataset: Dataset[Any], rank: int, epoch: int) -> list[tuple[torch.Tensor, ...]]:
    sampler = ShardedBatchSampler(
        len(dataset),  # type: ignore[arg-type]
        batch_size=BATCH,
        rank=rank,
        world_size=WORKERS,
        seed=SEED,
    )
    sampler.set_epoch(epoch)
    return [tuple(b) for b in DataLoader(dataset, batch_sampler=sampler)]


def _today_eval(dataset: Dataset[Any], rank: int) -> list[tuple[torch.Tensor, ...]]:
    shard = eval_shard(len(dataset), rank=rank, world_size=WORKERS)  # type: ignore[arg-type]
    return [tuple(b) for b in DataLoader(Subset(dataset, shard), batch_size=EVAL_BATCH)]


def _assert_bit_equal(ours: list[tuple[torch.Tensor, ...]], today: list[tuple[torch.Tensor, ...]]):
    assert len(ours) == len(today) > 0
    for mine, theirs in zip(ours, today, strict=True):
        assert len(mine) == len(theirs)
        for a, b in zip(mine, theirs, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert torch.equal(a, b)


@pytest.mark.parametrize("option", sorted(CASES))
def test_batches_equal_todays_loader_bit_for_bit(option, tmp_path):
    data = _load(option, tmp_path)
    assert isinstance(data.train, InMemorySplit) and isinstance(data.test, InMemorySplit)
    train, test = CASES[option][1](tmp_path, data)
    for rank in range(WORKERS):
        feeds = feeds_of(
            data, batch=BATCH, eval_batch=EVAL_BATCH, rank=rank, workers=WORKERS, seed=SEED
        )
        for epoch in (0, 1):
            ours = list(feeds.train.epoch(epoch, skip=0))
            _assert_bit_equal(ours, _today_train(train, rank, epoch))
        _assert_bit_equal(list(feeds.evaluation), _today_eval(test, rank))
