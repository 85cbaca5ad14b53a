"""Schemas of the compressors that keep every element at fewer bits: terngrad, qsgd, signsgd,
fp16, bf16."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import II

from gradsync.compressors.choices import QSGD_MAX_LEVELS
from gradsync.config.checks import require
from gradsync.config.schemas.compressors import CompressorConfig


@dataclass
class TernGradConfig(CompressorConfig):
    _target_: str = "gradsync.compressors.terngrad.TernGradCompressor"
    clip: float = 2.5
    """Clip each tensor at clip·σ before ternarizing; 0 turns clipping off."""
    share_scalers: bool = True
    """All workers use the largest scaler of each tensor (one float per tensor all-reduced with
    MAX); false: each worker sends its own (the ablation without scaler sharing)."""
    quantize_last: bool = False
    """Ternarize the last classifier layer (the last two tensors) too; by default it stays float."""
    float_every_epochs: int = 0
    """Send float gradients in every E-th epoch (E, 2E, ...); 0: never."""
    seed: int = II("trainer.seed")
    """Seeds the ternary draws, with the worker's rank, the step and the group."""

    def __post_init__(self) -> None:
        require(self.clip >= 0, f"compressor.clip must be >= 0 (0 disables it), got {self.clip}")
        require(
            self.float_every_epochs >= 0,
            f"compressor.float_every_epochs must be >= 0 (0: never), got {self.float_every_epochs}",
        )


@dataclass
class QSGDConfig(CompressorConfig):
    _target_: str = "gradsync.compressors.qsgd.QSGDCompressor"
    levels: int = 127
    """s: quantization levels per sign. Codes take 2s+1 values and travel at 2 bits (s=1),
    4 bits (s<=7) or 8 bits (s<=127)."""
    seed: int = II("trainer.seed")
    """Seeds the stochastic rounding, with the worker's rank, the step and the group."""

    def __post_init__(self) -> None:
        require(
            1 <= self.levels <= QSGD_MAX_LEVELS,
            f"compressor.levels must be in [1, {QSGD_MAX_LEVELS}], got {self.levels}",
        )


@dataclass
class SignSGDConfig(CompressorConfig):
    _target_: str = "gradsync.compressors.signsgd.SignSGDCompressor"


@dataclass
class FP16Config(CompressorConfig):
    _target_: str = "gradsync.compressors.fp16.FP16Compressor"


@dataclass
class BF16Config(CompressorConfig):
    _target_: str = "gradsync.compressors.bf16.BF16Compressor"


SCHEMAS: dict[str, dict[str, type]] = {
    "compressor": {
        "terngrad": TernGradConfig,
        "qsgd": QSGDConfig,
        "signsgd": SignSGDConfig,
        "fp16": FP16Config,
        "bf16": BF16Config,
    }
}
