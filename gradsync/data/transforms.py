"""The per-sample torchvision transforms of the datasets read from disk (ImageNet). Datasets
held in memory apply the same arithmetic to whole batches (``image_batches.py``)."""

from __future__ import annotations

from torchvision import transforms as T

from gradsync.data.stats import IMAGENET_STATS, Stats


def to_normalized_tensor(stats: Stats) -> T.Compose:
    """PIL image -> float C×H×W tensor standardized per channel (``image_batches.Normalization``
    does the same to a batch)."""
    mean, std = stats
    return T.Compose([T.ToTensor(), T.Normalize(mean, std)])


def imagenet_train(image_size: int, *, augment: bool) -> T.Compose:
    if not augment:
        return imagenet_eval(image_size)
    return T.Compose(
        [
            T.RandomResizedCrop(image_size),
            T.RandomHorizontalFlip(),
            to_normalized_tensor(IMAGENET_STATS),
        ]
    )


def imagenet_eval(image_size: int) -> T.Compose:
    # Resize the short side to 256/224 of the crop (256 for 224) as the reference recipes do.
    return T.Compose(
        [
            T.Resize(round(image_size * 256 / 224)),
            T.CenterCrop(image_size),
            to_normalized_tensor(IMAGENET_STATS),
        ]
    )
