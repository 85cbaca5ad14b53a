"""Schemas of the small models every machine can train: ``model=mlp`` and ``model=cnn``."""

from __future__ import annotations

from dataclasses import dataclass, field

from gradsync.config.checks import require
from gradsync.config.schema import TaskBound


@dataclass
class MLPConfig(TaskBound):
    _target_: str = "gradsync.models.mlp.MLP"
    _partial_: bool = True
    hidden: list[int] = field(default_factory=lambda: [128, 64])
    """Widths of the hidden layers, input to output."""

    def __post_init__(self) -> None:
        require(all(h >= 1 for h in self.hidden), "model.hidden sizes must be >= 1")


@dataclass
class CNNConfig(TaskBound):
    _target_: str = "gradsync.models.cnn.CNN"
    _partial_: bool = True
    channels: list[int] = field(default_factory=lambda: [16, 32])
    """Output channels of each 3×3 convolution (ReLU after each; one 2×2 max-pool after the
    last)."""
    hidden: int = 64
    """Width of the fully connected layer before the classifier."""

    def __post_init__(self) -> None:
        require(len(self.channels) >= 1, "model.channels needs at least one entry")
        require(all(c >= 1 for c in self.channels), "model.channels must be >= 1")
        require(self.hidden >= 1, "model.hidden must be >= 1")


SCHEMAS: dict[str, dict[str, type]] = {"model": {"mlp": MLPConfig, "cnn": CNNConfig}}
