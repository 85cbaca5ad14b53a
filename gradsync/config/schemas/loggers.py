"""Schemas of ``logger=console`` and ``logger=wandb``, and of the trainer (one option,
``default``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from gradsync.config.checks import Options, option
from gradsync.config.schema import TrainerConfig


@dataclass
class WandbConfig(Options):
    GROUP: ClassVar[str] = "logger.wandb"
    project: str = "gradsync"
    """wandb project the run is logged to."""
    entity: str | None = None
    """wandb user or team; null: the client's default."""
    group: str | None = None
    """wandb run group; null: the run's name."""
    tags: list[str] = field(default_factory=list)
    """wandb tags of the run."""
    mode: str = option("offline", choices=("offline", "online", "disabled"))
    """offline (default), online or disabled; WANDB_MODE in the environment takes precedence."""


@dataclass
class LoggerConfig:
    progress: bool = True
    """tqdm progress bar on rank 0 (only when the terminal is interactive)."""
    wandb: WandbConfig | None = None
    """Settings of the wandb client; null: no wandb (logger=console)."""


SCHEMAS: dict[str, dict[str, type]] = {
    "trainer": {"default": TrainerConfig},
    "logger": {"console": LoggerConfig, "wandb": LoggerConfig},
}
