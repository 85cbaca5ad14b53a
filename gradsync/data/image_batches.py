"""Batched image transforms: torchvision's per-sample ToTensor, Normalize, RandomCrop and
RandomHorizontalFlip, applied to a whole batch of uint8 images at once on the device that holds
it.

``Normalization`` does ToTensor's and Normalize's arithmetic in their order (divide by 255,
subtract the mean, divide by the std, float32), so an unaugmented batch equals torchvision's
bit for bit. Every operand is a tensor on the batch's device: CUDA turns a division by a host
scalar into a multiplication by its reciprocal, which rounds differently.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from gradsync.data.stats import Stats

CROP_DRAWS = 3
"""Per image, what ``PadCropFlip`` draws: row offset, column offset, flip (0 or 1)."""


class Normalization:
    """uint8 N×C×H×W pixels -> float32, standardized per channel."""

    def __init__(self, stats: Stats, device: torch.device | str = "cpu") -> None:
        self.stats = stats
        mean, std = stats
        self.scale = torch.tensor(255.0, device=device)
        self.mean = torch.tensor(mean, dtype=torch.float32, device=device).view(-1, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32, device=device).view(-1, 1, 1)

    def to(self, device: torch.device) -> Normalization:
        return Normalization(self.stats, device)

    def __call__(self, pixels: Tensor) -> Tensor:
        return pixels.float().div(self.scale).sub(self.mean).div(self.std)


@dataclass(frozen=True)
class PadCropFlip:
    """The usual CIFAR augmentation (torchvision's RandomCrop(size, padding) then
    RandomHorizontalFlip): a crop of the image's own size from the image zero-padded by
    ``padding`` pixels on every side, at an offset uniform in 0..2·padding per axis, mirrored
    left to right with probability one half."""

    padding: int = 4

    def draw(self, count: int, generator: torch.Generator | None) -> Tensor:
        """``count`` images' draws, ``CROP_DRAWS`` int64 each (None: torch's global generator)."""
        offsets = torch.randint(0, 2 * self.padding + 1, (count, 2), generator=generator)
        flips = torch.randint(0, 2, (count, 1), generator=generator)
        return torch.cat([offsets, flips], dim=1)

    def __call__(self, pixels: Tensor, draws: Tensor) -> Tensor:
        """Each of the N×C×H×W images cropped and flipped as its row of ``draws`` says."""
        n, c, h, w = pixels.shape
        p = self.padding
        padded = F.pad(pixels, (p, p, p, p))  # zeros: black pixels, as torchvision's fill=0
        rows = draws[:, 0:1] + torch.arange(h, device=pixels.device)  # N×H
        across = torch.arange(w, device=pixels.device)
        mirrored = torch.where(draws[:, 2:3].bool(), w - 1 - across, across)  # N×W
        cols = draws[:, 1:2] + mirrored
        # One gather for the whole batch: each output pixel's place in its padded image.
        source = (rows[:, :, None] * (w + 2 * p) + cols[:, None, :]).view(n, 1, h * w)
        cropped = padded.view(n, c, -1).gather(2, source.expand(n, c, h * w))
        return cropped.view(n, c, h, w)


class ImageBatches:
    """What a split of uint8 images does to a batch: its augmentation (training, optional),
    then normalization."""

    def __init__(self, normalization: Normalization, augmentation: PadCropFlip | None) -> None:
        self.normalization = normalization
        self.augmentation = augmentation

    def to(self, device: torch.device) -> ImageBatches:
        return ImageBatches(self.normalization.to(device), self.augmentation)

    def draw(self, count: int, generator: torch.Generator | None) -> Tensor | None:
        if self.augmentation is None:
            return None
        return self.augmentation.draw(count, generator)

    def __call__(self, pixels: Tensor, draws: Tensor | None) -> Tensor:
        if self.augmentation is not None and draws is not None:
            pixels = self.augmentation(pixels, draws)
        return self.normalization(pixels)
