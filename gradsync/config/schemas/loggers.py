"""Schemas of ``logger=console`` and ``logger=wandb``, and of the trainer (one option,
``default``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gradsync.config.checks import require
from gradsync.config.schema import TrainerConfig


@dataclass
class WandbConfig:
    project: str = "gradsync"
    """wandb project the run is logged to."""
    entity: str | None = None
    """wandb user or team; null: the client's default."""
    group: str | None = None
    """wandb run group; null: the run's name."""
    tags: list[str] = field(default_factory=list)
    """wandb tags of the run."""
    mode: str = "offline"
    """offline (default), online or disabled; WANDB_MODE in the environment takes precedence."""

    def __post_init__(self) -> None:
        modes = ("offline", "online", "disabled")
        require(self.mode in modes, f"logger.wandb.mode must be one of {', '.join(modes)}")


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
