"""Typed schemas behind every config group.

Each option file in ``gradsync/conf/<group>/`` starts from one of these dataclasses (its defaults
list names ``/schema/<group>/<option>``), so a misspelt key or a wrong type fails when the config
is composed. Range checks live in ``__post_init__``: they run when the composed config is turned
into objects (``OmegaConf.to_object``) in the launching process, before any output is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import II, MISSING


class Device(Enum):
    cpu = "cpu"
    cuda = "cuda"


class OptimizerName(Enum):
    sgd = "sgd"
    adam = "adam"


class LRSchedule(Enum):
    constant = "constant"
    step = "step"
    multistep = "multistep"
    cosine = "cosine"


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


@dataclass
class TrainerConfig:
    workers: int = 2
    """Worker processes (data-parallel ranks)."""
    device: Device = Device.cpu
    epochs: int = 10
    max_steps: int | None = None
    """Stop after this many optimizer steps in total (None: run all epochs)."""
    batch_size: int = 32
    """Samples per worker per step; the global batch is workers × batch_size."""
    lr: float = 0.05
    optimizer: OptimizerName = OptimizerName.sgd
    momentum: float = 0.9
    nesterov: bool = False
    weight_decay: float = 0.0
    lr_schedule: LRSchedule = LRSchedule.constant
    lr_step_epochs: int = 30
    lr_milestones: list[int] = field(default_factory=list)
    lr_gamma: float = 0.1
    seed: int = 0
    log_every: int = 10
    eval_every_epochs: int = 1
    checkpoint: bool = True
    """Save a resumable checkpoint at every epoch end and at the last step."""
    resume: str | None = None
    """A checkpoint directory, or a run directory whose latest checkpoint is used."""
    threads_per_worker: int = 1
    dist_timeout_s: int = 120

    def __post_init__(self) -> None:
        _require(self.workers >= 1, f"trainer.workers must be >= 1, got {self.workers}")
        _require(self.epochs >= 1, f"trainer.epochs must be >= 1, got {self.epochs}")
        _require(
            self.max_steps is None or self.max_steps >= 1,
            f"trainer.max_steps must be >= 1 or null, got {self.max_steps}",
        )
        _require(self.batch_size >= 1, f"trainer.batch_size must be >= 1, got {self.batch_size}")
        _require(self.lr > 0, f"trainer.lr must be > 0, got {self.lr}")
        _require(0 <= self.momentum < 1, f"trainer.momentum must be in [0, 1), got {self.momentum}")
        _require(self.weight_decay >= 0, "trainer.weight_decay must be >= 0")
        _require(self.log_every >= 1, f"trainer.log_every must be >= 1, got {self.log_every}")
        _require(self.eval_every_epochs >= 1, "trainer.eval_every_epochs must be >= 1")
        _require(self.threads_per_worker >= 1, "trainer.threads_per_worker must be >= 1")
        _require(self.dist_timeout_s >= 1, "trainer.dist_timeout_s must be >= 1")
        _require(
            not (self.nesterov and self.momentum == 0),
            "trainer.nesterov=true needs trainer.momentum > 0",
        )


# ---- models -------------------------------------------------------------------------------
@dataclass
class MLPConfig:
    _target_: str = "gradsync.models.mlp.MLP"
    _partial_: bool = True
    hidden: list[int] = field(default_factory=lambda: [128, 64])

    def __post_init__(self) -> None:
        _require(all(h >= 1 for h in self.hidden), "model.hidden sizes must be >= 1")


@dataclass
class CNNConfig:
    _target_: str = "gradsync.models.cnn.CNN"
    _partial_: bool = True
    channels: list[int] = field(default_factory=lambda: [16, 32])
    hidden: int = 64

    def __post_init__(self) -> None:
        _require(len(self.channels) >= 1, "model.channels needs at least one entry")
        _require(all(c >= 1 for c in self.channels), "model.channels must be >= 1")
        _require(self.hidden >= 1, "model.hidden must be >= 1")


# ---- datasets -----------------------------------------------------------------------------
@dataclass
class DigitsConfig:
    _target_: str = "gradsync.data.digits.Digits"
    test_fraction: float = 0.2
    split_seed: int = 0

    def __post_init__(self) -> None:
        _require(
            0 < self.test_fraction < 1,
            f"dataset.test_fraction must be in (0, 1), got {self.test_fraction}",
        )


# ---- compressors --------------------------------------------------------------------------
@dataclass
class NoneCompressorConfig:
    _target_: str = "gradsync.compressors.none.NoneCompressor"


@dataclass
class SparsifierConfig:
    """Shared by every compressor that keeps a fraction ``density`` of the gradient."""

    density: float = 0.01

    def __post_init__(self) -> None:
        _require(
            0 < self.density <= 1,
            f"compressor.density must be in (0, 1], got {self.density}",
        )


@dataclass
class RandomKConfig(SparsifierConfig):
    _target_: str = "gradsync.compressors.randomk.RandomKCompressor"
    seed: int = II("trainer.seed")


# ---- error feedback -----------------------------------------------------------------------
@dataclass
class NoneFeedbackConfig:
    _target_: str = "gradsync.feedback.none.NoneFeedback"


@dataclass
class ResidualFeedbackConfig:
    _target_: str = "gradsync.feedback.residual.ResidualFeedback"


# ---- synchronization schedulers -----------------------------------------------------------
@dataclass
class AllreduceSchedulerConfig:
    _target_: str = "gradsync.sync.allreduce.AllreduceSync"
    _partial_: bool = True


# ---- runners ------------------------------------------------------------------------------
@dataclass
class LocalRunnerConfig:
    _target_: str = "runners.local.LocalRunner"
    workers: int = II("trainer.workers")
    grace_period_s: float = 3.0
    """How long surviving workers get to exit after one fails, before they are killed."""

    def __post_init__(self) -> None:
        _require(self.grace_period_s >= 0, "runner.grace_period_s must be >= 0")


# ---- loggers ------------------------------------------------------------------------------
@dataclass
class WandbConfig:
    project: str = "gradsync"
    entity: str | None = None
    group: str | None = None
    tags: list[str] = field(default_factory=list)
    mode: str = "offline"
    """offline (default), online or disabled; WANDB_MODE in the environment takes precedence."""

    def __post_init__(self) -> None:
        modes = ("offline", "online", "disabled")
        _require(self.mode in modes, f"logger.wandb.mode must be one of {', '.join(modes)}")


@dataclass
class LoggerConfig:
    progress: bool = True
    """tqdm progress bar on rank 0 (only when the terminal is interactive)."""
    wandb: WandbConfig | None = None


# ---- root ---------------------------------------------------------------------------------
@dataclass
class TrainConfig:
    model: Any = MISSING
    dataset: Any = MISSING
    compressor: Any = MISSING
    feedback: Any = MISSING
    scheduler: Any = MISSING
    trainer: TrainerConfig = MISSING
    runner: Any = MISSING
    logger: LoggerConfig = MISSING
    name: str = "gradsync"
    """Run name, used by loggers (wandb run group) and reports."""


_GROUP_SCHEMAS: dict[str, dict[str, type]] = {
    "trainer": {"default": TrainerConfig},
    "model": {"mlp": MLPConfig, "cnn": CNNConfig},
    "dataset": {"digits": DigitsConfig},
    "compressor": {"none": NoneCompressorConfig, "randomk": RandomKConfig},
    "feedback": {"none": NoneFeedbackConfig, "residual": ResidualFeedbackConfig},
    "scheduler": {"allreduce": AllreduceSchedulerConfig},
    "runner": {"local": LocalRunnerConfig},
    "logger": {"console": LoggerConfig, "wandb": LoggerConfig},
}


def register_schemas() -> None:
    """Store every schema in Hydra's ConfigStore under ``schema/<group>/<option>``."""
    store = ConfigStore.instance()
    store.store(name="schema_train", node=TrainConfig)
    for group, options in _GROUP_SCHEMAS.items():
        for option, node in options.items():
            store.store(group=f"schema/{group}", name=option, node=node)
