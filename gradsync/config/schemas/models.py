"""Schemas of the small models every machine can train: ``model=mlp`` and ``model=cnn``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gradsync.config.checks import Options, option
from gradsync.config.schema import TaskBound


@dataclass
class MLPConfig(TaskBound, Options):
    GROUP: ClassVar[str] = "model"
    _target_: str = "gradsync.models.mlp.MLP"
    _partial_: bool = True
    hidden: list[int] = option(default_factory=lambda: [128, 64], each=True, at_least=1)
    """Widths of the hidden layers, input to output."""


@dataclass
class CNNConfig(TaskBound, Options):
    GROUP: ClassVar[str] = "model"
    _target_: str = "gradsync.models.cnn.CNN"
    _partial_: bool = True
    channels: list[int] = option(
        default_factory=lambda: [16, 32], each=True, at_least=1, min_entries=1
    )
    """Output channels of each 3×3 convolution (ReLU after each; one 2×2 max-pool after the
    last)."""
    hidden: int = option(64, at_least=1)
    """Width of the fully connected layer before the classifier."""


SCHEMAS: dict[str, dict[str, type]] = {"model": {"mlp": MLPConfig, "cnn": CNNConfig}}
