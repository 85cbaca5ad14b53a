"""One worker's batches of loaded splits, as the training loop gets them (``make_feeds``), and
the data-path cases that the GPU tests and their CPU counterparts share."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from gradsync.config.instantiate import build
from gradsync.data.feeds import Batch, Feeds, make_feeds
from gradsync.data.spec import DataSplits
from gradsync.jobs.compose import compose_jobs
from tests.helpers.datagen.images import write_cifar10, write_imagenet

CPU = torch.device("cpu")


def feeds_of(
    data: DataSplits,
    *,
    batch: int,
    eval_batch: int | None = None,
    device: torch.device = CPU,
    rank: int = 0,
    workers: int = 1,
    seed: int = 0,
    loader_workers: int = 0,
) -> Feeds:
    return make_feeds(
        data,
        device=device,
        batch_size=batch,
        eval_batch_size=batch if eval_batch is None else eval_batch,
        rank=rank,
        workers=workers,
        seed=seed,
        loader_workers=loader_workers,
    )


# ---- the data-path cases ----------------------------------------------------------------------
CASE_BATCH, CASE_EVAL_BATCH, CASE_SEED = 2, 4, 3
DATA_PATH_CASES: dict[str, Callable[[Path], list[str]]] = {
    "cifar10": write_cifar10,  # held in memory, augmented: crop and flip
    "imagenet": lambda root: [*write_imagenet(root), "dataset.image_size=32"],  # loader processes
    "synthetic": lambda root: [
        "dataset.image_shape=[3,64,64]",
        "dataset.num_samples=40",
        "dataset.num_test_samples=8",
    ],
}
"""Per dataset option, the overrides of its files (written under a root) or of its sizes."""


def load_case(option: str, root: Path) -> DataSplits:
    """The case's splits, loaded as a job of the cases' batch size composes them (a set smaller
    than the default batch is refused)."""
    overrides = [f"dataset={option}", *DATA_PATH_CASES[option](root)]
    cfg = compose_jobs([*overrides, f"trainer.batch_size={CASE_BATCH}"], multirun=False)[0]
    return build(cfg.dataset, path="dataset").load()


def case_feeds(data: DataSplits, device: torch.device, loader_workers: int = 0) -> Feeds:
    return feeds_of(
        data,
        batch=CASE_BATCH,
        eval_batch=CASE_EVAL_BATCH,
        device=device,
        seed=CASE_SEED,
        loader_workers=loader_workers,
    )


def assert_same_batches(got: list[Batch], expected: list[Batch], device: torch.device) -> None:
    """``got`` (on ``device``'s kind) equals ``expected`` (on the CPU) bit for bit, and there
    are some."""
    assert len(got) == len(expected) > 0
    for got_batch, expected_batch in zip(got, expected, strict=True):
        for a, b in zip(got_batch, expected_batch, strict=True):
            assert a.device.type == device.type
            assert a.dtype == b.dtype and torch.equal(a.cpu(), b)
