"""The compressors' base schema (what every ``compressor=`` option declares to the config
checks), the sparsifiers' shared options, and ``compressor=none`` and ``randomk``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from omegaconf import II

from gradsync.compressors.warmup import DEFAULT_WARMUP_DENSITY
from gradsync.config.checks import require


class CompressorConfig:
    """Base of every compressor option's schema: what the compressor asks of the rest of the
    job, checked for every option alike when a config is composed (``check_config``)."""

    applies_momentum: ClassVar[bool] = False
    """The compressor applies momentum to what it sends (DGC's momentum correction, its
    ``momentum`` option), so the optimizer steps without any (``build_optimizer``)."""
    keeps_own_residual: ClassVar[bool] = False
    """The compressor accumulates what it did not send itself (DGC, PowerSGD): an
    error-feedback residual on top would keep it twice, so a feedback that always keeps one is
    refused."""
    needs_its_exchange_back: ClassVar[bool] = False
    """Its memory needs the exchange's result on the worker (PowerSGD's error is the compensated
    gradient less the workers' mean), which a parameter server keeps: refused with one."""


@dataclass
class NoneCompressorConfig(CompressorConfig):
    _target_: str = "gradsync.compressors.none.NoneCompressor"


@dataclass
class SparsifierConfig(CompressorConfig):
    """Shared by every compressor that keeps a fraction ``density`` of the gradient."""

    density: float = 0.01
    """Fraction of the elements each worker selects (k = int(density · elements)), after the
    warm-up."""
    warmup_epochs: int = 0
    """DGC's density warm-up: over the first warmup_epochs epochs the density falls
    exponentially from warmup_density to density (epoch e: warmup_density ·
    (density/warmup_density)^(e/warmup_epochs)); 0: no warm-up."""
    warmup_density: float = DEFAULT_WARMUP_DENSITY
    """The density of the first epoch when warmup_epochs > 0 (DGC: 0.25, i.e. 75% sparsity)."""

    def __post_init__(self) -> None:
        require(
            0 < self.density <= 1,
            f"compressor.density must be in (0, 1], got {self.density}",
        )
        require(
            self.warmup_epochs >= 0,
            f"compressor.warmup_epochs must be >= 0 (0: no warm-up), got {self.warmup_epochs}",
        )
        require(
            0 < self.warmup_density <= 1,
            f"compressor.warmup_density must be in (0, 1], got {self.warmup_density}",
        )
        require(
            self.warmup_epochs == 0 or self.warmup_density >= self.density,
            f"compressor.warmup_density ({self.warmup_density}) must be >= compressor.density "
            f"({self.density}): the warm-up starts denser and decays to it",
        )


@dataclass
class RandomKConfig(SparsifierConfig):
    _target_: str = "gradsync.compressors.randomk.RandomKCompressor"
    seed: int = II("trainer.seed")
    """Seed of the random index selection; every worker draws the same indices (default:
    trainer.seed)."""


SCHEMAS: dict[str, dict[str, type]] = {
    "compressor": {"none": NoneCompressorConfig, "randomk": RandomKConfig}
}
