"""Augmentation of the training batches: the batched crop and flip of splits held in memory
(their distribution, and each output against the crop it stands for), and, for them and for
datasets read by loader processes, draws that depend on the seed, the epoch and the sample's
position in the epoch's order only: the same for the same seed and worker, for any number of
workers or loader processes, and for a run resumed in the middle of an epoch."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from gradsync.config.instantiate import build
from gradsync.data.feeds import Batch
from gradsync.data.image_batches import ImageBatches, Normalization, PadCropFlip
from gradsync.data.memory import TensorSplit
from gradsync.data.spec import DataSpec, DataSplits
from gradsync.jobs.compose import compose_jobs
from tests.helpers.datagen.images import write_cifar10, write_imagenet
from tests.helpers.feeds import feeds_of

SIDE, PADDING = 32, 4


def _feed_batches(
    data: DataSplits,
    *,
    batch: int,
    rank: int = 0,
    workers: int = 2,
    seed: int = 0,
    epoch: int = 0,
    skip: int = 0,
    loader_workers: int = 0,
) -> list[Batch]:
    feeds = feeds_of(
        data,
        batch=batch,
        rank=rank,
        workers=workers,
        seed=seed,
        loader_workers=loader_workers,
    )
    return list(feeds.train.epoch(epoch, skip=skip))


def _same(a: list[Batch], b: list[Batch]) -> bool:
    return len(a) == len(b) and all(
        torch.equal(x, y) for p, q in zip(a, b, strict=True) for x, y in zip(p, q, strict=True)
    )


# ---- the crop and the flip ------------------------------------------------------------------
def _coordinates(count: int) -> Tensor:
    """``count`` copies of one 2×32×32 image whose pixels say where they are: row+1, column+1
    (so the zero padding stays apart from every pixel)."""
    rows = torch.arange(1, SIDE + 1, dtype=torch.uint8).view(SIDE, 1).expand(SIDE, SIDE)
    image = torch.stack([rows, rows.T])
    return image.expand(count, 2, SIDE, SIDE).contiguous()


def _crop(offset_row: int, offset_col: int, flip: bool) -> np.ndarray:
    """What torchvision's RandomCrop(32, padding=4) and a flip give for these draws."""
    padded = np.pad(_coordinates(1)[0].numpy(), ((0, 0), (PADDING,) * 2, (PADDING,) * 2))
    window = padded[:, offset_row : offset_row + SIDE, offset_col : offset_col + SIDE]
    return window[:, :, ::-1] if flip else window


def _coordinate_split(count: int) -> DataSplits:
    unit = ((0.0, 0.0), (1.0, 1.0))  # normalization to pixel / 255: the values stay readable
    split = TensorSplit(
        _coordinates(count),
        torch.zeros(count, dtype=torch.int64),
        images=ImageBatches(Normalization(unit), PadCropFlip(padding=PADDING)),
    )
    return DataSplits(spec=DataSpec(task="classification"), train=split, test=split)


def _draws(batches: list[Batch]) -> list[tuple[int, int, bool]]:
    """(row offset, column offset, flipped) of each image of coordinate batches, read from
    the image and checked against the crop they stand for."""
    images = torch.cat([b[0] for b in batches])
    found = []
    middle = SIDE // 2  # always inside the image, whatever the offset
    for out in (images * 255).round().to(torch.int64).numpy():
        flip = bool(out[1, middle, middle + 1] < out[1, middle, middle])
        row = int(out[0, middle, middle]) - 1 - middle + PADDING
        col = int(out[1, middle, middle]) - 1 + PADDING - (SIDE - 1 - middle if flip else middle)
        np.testing.assert_array_equal(out, _crop(row, col, flip))
        found.append((row, col, flip))
    return found


def test_crops_are_windows_of_the_padded_image_at_uniform_offsets_half_flipped():
    count = 4500
    data = _coordinate_split(count)
    draws = [d for epoch in (0, 1) for d in _draws(_feed_batches(data, batch=50, epoch=epoch))]
    assert len(draws) == count  # two epochs of one worker's half
    expected = count / (2 * PADDING + 1)
    for axis in (0, 1):
        counts = Counter(d[axis] for d in draws)
        assert sorted(counts) == list(range(2 * PADDING + 1))
        # About 21 per offset is one standard deviation: these bounds are six of them.
        assert all(abs(n - expected) < 0.3 * expected for n in counts.values()), counts
    assert 0.45 < sum(d[2] for d in draws) / count < 0.55


# ---- the same draws for the same sample and position -------------------------------------------
def test_the_same_seed_and_worker_draw_the_same_augmentations():
    data = _coordinate_split(400)
    draws = _draws(_feed_batches(data, batch=20))
    assert draws == _draws(_feed_batches(_coordinate_split(400), batch=20))
    assert draws != _draws(_feed_batches(data, batch=20, rank=1))
    assert draws != _draws(_feed_batches(data, batch=20, seed=1))
    assert draws != _draws(_feed_batches(data, batch=20, epoch=1))


def _cifar(root: Path) -> DataSplits:
    cfg = compose_jobs(["dataset=cifar10", *write_cifar10(root)], multirun=False)[0]
    return build(cfg.dataset, path="dataset").load()


def test_augmentations_follow_positions_whatever_the_worker_count(tmp_path):
    data = _cifar(tmp_path)
    two = [_feed_batches(data, batch=2, rank=r, workers=2) for r in range(2)]
    one = _feed_batches(data, batch=4, workers=1)
    for j, whole in enumerate(one):
        for k, tensor in enumerate(whole):
            assert torch.equal(tensor, torch.cat([two[0][j][k], two[1][j][k]]))


def test_an_epoch_resumed_at_a_batch_continues_with_the_same_draws(tmp_path):
    data = _cifar(tmp_path)
    whole = _feed_batches(data, batch=2, epoch=3)
    assert _same(_feed_batches(data, batch=2, epoch=3, skip=2), whole[2:])


# ---- datasets read by loader processes -------------------------------------------------------
def test_loader_processes_draw_what_the_position_says(tmp_path):
    cfg = compose_jobs(
        ["dataset=imagenet", *write_imagenet(tmp_path), "dataset.image_size=32"], multirun=False
    )[0]
    data = build(cfg.dataset, path="dataset").load()
    here = _feed_batches(data, batch=2, workers=1, epoch=1)
    assert _same(here, _feed_batches(data, batch=2, workers=1, epoch=1, loader_workers=2))
    assert _same(_feed_batches(data, batch=2, workers=1, epoch=1, skip=1), here[1:])
    assert not _same(here, _feed_batches(data, batch=2, workers=1, epoch=1, seed=1))


def test_reading_in_the_training_process_leaves_the_devices_generators_alone(tmp_path, monkeypatch):
    # loader_workers=0 reads samples in the training process, whose CUDA generator (dropout,
    # a checkpoint's restored state) must not be reseeded by each sample's draws.
    cfg = compose_jobs(
        ["dataset=imagenet", *write_imagenet(tmp_path), "dataset.image_size=32"], multirun=False
    )[0]
    data = build(cfg.dataset, path="dataset").load()
    reseeded: list[int] = []
    monkeypatch.setattr(torch.cuda, "manual_seed_all", reseeded.append)
    assert _feed_batches(data, batch=2, workers=1, epoch=1)
    assert reseeded == []
