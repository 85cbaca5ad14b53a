"""Schemas of the compressors that keep every element at fewer bits: terngrad, qsgd, signsgd,
fp16, bf16."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gradsync.compressors.choices import QSGD_MAX_LEVELS
from gradsync.compressors.options.base import CompressorConfig, job_seed_option
from gradsync.config.checks import MAX_EPOCHS, option

MAX_CLIP = 1_000.0
"""Clipping at this many σ already clips nothing a gradient holds."""


@dataclass
class TernGradConfig(CompressorConfig):
    """TernGrad: per-tensor ternary gradients s·{-1,0,+1} at 2 bits each, clipped at clip·σ,
    scalers shared (max over workers), last classifier layer in float; all-gathered and
    averaged."""

    _target_: str = "gradsync.compressors.terngrad.TernGradCompressor"
    clip: float = option(2.5, at_least=0, hint="(0 disables it)", limit=MAX_CLIP)
    """Clip each tensor at clip·σ before ternarizing; 0 turns clipping off."""
    share_scalers: bool = True
    """All workers use the largest scaler of each tensor (one float per tensor all-reduced with
    MAX); false: each worker sends its own (the ablation without scaler sharing)."""
    quantize_last: bool = False
    """Ternarize the last classifier layer (the last two tensors) too; by default it stays float."""
    float_every_epochs: int = option(0, at_least=0, hint="(0: never)", limit=MAX_EPOCHS)
    """Send float gradients in every E-th epoch (E, 2E, ...); 0: never."""
    seed: int = job_seed_option()
    """Seeds the ternary draws, with the worker's rank, the step and the group."""


@dataclass
class QSGDConfig(CompressorConfig):
    """QSGD: per-tensor stochastic rounding to ``levels`` levels of |g|/||g||, with the
    norm; all-gathered."""

    _target_: str = "gradsync.compressors.qsgd.QSGDCompressor"
    levels: int = option(127, at_least=1, at_most=QSGD_MAX_LEVELS)
    """s: quantization levels per sign. Codes take 2s+1 values and travel at 2 bits (s=1),
    4 bits (s<=7) or 8 bits (s<=127)."""
    seed: int = job_seed_option()
    """Seeds the stochastic rounding, with the worker's rank, the step and the group."""


@dataclass
class SignSGDConfig(CompressorConfig):
    """EF-signSGD: one bit per element plus the mean magnitude per tensor, with error
    feedback."""

    _target_: str = "gradsync.compressors.signsgd.SignSGDCompressor"


@dataclass
class FP16Config(CompressorConfig):
    """Half precision on the wire, all-reduced directly."""

    _target_: str = "gradsync.compressors.fp16.FP16Compressor"
    payloads_add_up: ClassVar[bool] = True


@dataclass
class BF16Config(CompressorConfig):
    """bfloat16 on the wire, all-reduced directly."""

    _target_: str = "gradsync.compressors.bf16.BF16Compressor"
    payloads_add_up: ClassVar[bool] = True
