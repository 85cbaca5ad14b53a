"""Per-dataset channel statistics. Torchvision-free: every training process imports the batch
transforms that use them, and importing torchvision costs a worker seconds (it pulls in
torch's compiler)."""

from __future__ import annotations

Stats = tuple[tuple[float, ...], tuple[float, ...]]
"""(per-channel mean, per-channel std) of the training images, in [0, 1] pixel units."""

CIFAR10_STATS: Stats = ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))
CIFAR100_STATS: Stats = ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762))
MNIST_STATS: Stats = ((0.1307,), (0.3081,))
FASHION_MNIST_STATS: Stats = ((0.2860,), (0.3530,))
IMAGENET_STATS: Stats = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
