"""Every logger's options (``logger=console``, ``wandb``) and the registry of them. Torch-free."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from gradsync.config.checks import Options, option


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


LOGGERS: Mapping[str, type] = {"console": LoggerConfig, "wandb": LoggerConfig}
"""Every ``logger=`` option; its YAML file in ``conf/logger/`` starts from it."""
