"""What a model needs to know about its data, handed to model constructors at build time."""

from __future__ import annotations

from dataclasses import dataclass

from torch.utils.data import Dataset


@dataclass(frozen=True)
class DataSpec:
    task: str
    """What the data is for; selects the loss and eval metrics (``classification``)."""
    num_classes: int
    input_shape: tuple[int, ...]
    """Shape of one input sample, e.g. (channels, height, width)."""


@dataclass(frozen=True)
class DataSplits:
    spec: DataSpec
    train: Dataset
    test: Dataset
