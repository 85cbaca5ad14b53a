"""Splits held whole in memory: one tensor per field (images as uint8), moved to the worker's
device once, and cut into batches by an index tensor there, augmented by batched tensor ops
(``image_batches.py``). Taking a batch costs no per-sample Python work and, on a GPU, no host
sync.

They are also map-style datasets: ``split[i]`` is one sample, as the batch of that one index
(augmented, if at all, from torch's global generator), for code that reads samples one by one.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod

import torch
from torch import Tensor
from torch.utils.data import Dataset

from gradsync.data.image_batches import ImageBatches


class InMemorySplit(Dataset[tuple[Tensor, ...]], ABC):
    """A split whose batches are cut by ``batch`` from tensors it holds on ``device``."""

    @abstractmethod
    def __len__(self) -> int: ...

    @property
    @abstractmethod
    def device(self) -> torch.device: ...

    @abstractmethod
    def to(self, device: torch.device) -> InMemorySplit:
        """This split with its tensors on ``device`` (itself when they are there)."""

    @abstractmethod
    def batch(self, indices: Tensor, draws: Tensor | None = None) -> tuple[Tensor, ...]:
        """The samples at ``indices`` (int64, on the split's device), stacked; ``draws`` (one
        row per sample, from ``draw``) augment them, None leaves them as they are."""

    def draw(self, count: int, generator: torch.Generator | None) -> Tensor | None:
        """The random draws that augment ``count`` samples (on the host); None if the split
        is not augmented."""
        return None

    def __getitem__(self, index: int) -> tuple[Tensor, ...]:
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        one = torch.tensor([index % len(self)], device=self.device)
        draws = self.draw(1, None)
        batch = self.batch(one, None if draws is None else draws.to(self.device))
        return tuple(t[0] for t in batch)


class TensorSplit(InMemorySplit):
    """Sample i is row i of each of ``tensors`` (the model's input first). With ``images``,
    the first tensor holds uint8 images that it augments and normalizes per batch."""

    def __init__(self, *tensors: Tensor, images: ImageBatches | None = None) -> None:
        if not tensors or any(len(t) != len(tensors[0]) for t in tensors):
            raise ValueError("a TensorSplit needs tensors with one row per sample, all as long")
        self.tensors = tensors
        self.images = images

    def __len__(self) -> int:
        return len(self.tensors[0])

    @property
    def device(self) -> torch.device:
        return self.tensors[0].device

    def to(self, device: torch.device) -> TensorSplit:
        if self.device == device:
            return self
        moved = copy.copy(self)
        moved.tensors = tuple(t.to(device) for t in self.tensors)
        moved.images = None if self.images is None else self.images.to(device)
        return moved

    def rows(self, indices: Tensor) -> Tensor:
        """The stored rows that hold the samples at ``indices``."""
        return indices

    def draw(self, count: int, generator: torch.Generator | None) -> Tensor | None:
        return None if self.images is None else self.images.draw(count, generator)

    def batch(self, indices: Tensor, draws: Tensor | None = None) -> tuple[Tensor, ...]:
        rows = self.rows(indices)
        picked = [t.index_select(0, rows) for t in self.tensors]
        if self.images is not None:
            picked[0] = self.images(picked[0], draws)
        return tuple(picked)


class PooledSplit(TensorSplit):
    """``size`` samples that repeat a smaller pool: sample i is pool row i mod pool length."""

    def __init__(self, *pool: Tensor, size: int) -> None:
        super().__init__(*pool)
        self.size = size

    def __len__(self) -> int:
        return self.size

    def rows(self, indices: Tensor) -> Tensor:
        return indices.remainder(len(self.tensors[0]))
