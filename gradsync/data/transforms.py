"""Per-dataset channel statistics and the standard train/test transforms built from them."""

from __future__ import annotations

from torchvision import transforms as T

Stats = tuple[tuple[float, ...], tuple[float, ...]]
"""(per-channel mean, per-channel std) of the training images, in [0, 1] pixel units."""

CIFAR10_STATS: Stats = ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))
CIFAR100_STATS: Stats = ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762))
MNIST_STATS: Stats = ((0.1307,), (0.3081,))
FASHION_MNIST_STATS: Stats = ((0.2860,), (0.3530,))
IMAGENET_STATS: Stats = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


def to_normalized_tensor(stats: Stats) -> T.Compose:
    """PIL image -> float C×H×W tensor standardized per channel."""
    mean, std = stats
    return T.Compose([T.ToTensor(), T.Normalize(mean, std)])


def cifar_train(stats: Stats, *, augment: bool) -> T.Compose:
    """The usual CIFAR augmentation: random 32×32 crop of the 4-pixel zero-padded image, flip."""
    if not augment:
        return to_normalized_tensor(stats)
    return T.Compose(
        [T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), to_normalized_tensor(stats)]
    )


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
