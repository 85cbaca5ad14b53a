"""Schemas of the sparsifiers that select by magnitude: topk, threshold, cltk, deft, dgc."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from omegaconf import II

from gradsync.compressors.choices import EXCHANGES, SCOPES
from gradsync.config.checks import require
from gradsync.config.schemas.compressors import SparsifierConfig


def _check_exchange(exchange: str, compressor: str) -> None:
    if exchange == "allreduce":
        raise ValueError(
            f"compressor.exchange=allreduce is not valid for {compressor}: every worker selects "
            "different indices, so values cannot be summed elementwise; valid: "
            f"{', '.join(EXCHANGES)} (or use compressor=randomk, cltk or deft, which all-reduce)"
        )
    require(
        exchange in EXCHANGES,
        f"unknown compressor.exchange {exchange!r}; valid: {', '.join(EXCHANGES)}",
    )


@dataclass
class TopKConfig(SparsifierConfig):
    _target_: str = "gradsync.compressors.topk.TopKCompressor"
    exchange: str = "union"
    """union: all-gather indices, all-reduce values on their union (DEFT's baseline);
    allgather: all-gather values and indices (GRACE/OMGS)."""
    scope: str = "global"
    """global: k over the whole group (the whole model under scheduler=allreduce); layer:
    k_l = max(1, int(density * n_l)) per tensor."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_exchange(self.exchange, "topk")
        require(
            self.scope in SCOPES,
            f"unknown compressor.scope {self.scope!r}; valid: {', '.join(SCOPES)}",
        )


@dataclass
class ThresholdConfig(SparsifierConfig):
    _target_: str = "gradsync.compressors.threshold.ThresholdCompressor"
    density: float = 0.001
    """Used only to derive the threshold when it is unset: λ = 1/(2·sqrt(int(density·n_g)))."""
    threshold: float | None = None
    """λ: elements with |x| >= λ are sent. Fixed for the whole run."""
    exchange: str = "union"
    """union: all-gather indices, all-reduce values on their union (DEFT's baseline);
    allgather: all-gather values and indices."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_exchange(self.exchange, "threshold")
        require(
            self.threshold is None or self.threshold >= 0,
            f"compressor.threshold must be >= 0, got {self.threshold}",
        )
        require(
            self.threshold is None or self.warmup_epochs == 0,
            "compressor.warmup_epochs needs compressor.threshold unset: the warm-up's density "
            "sets λ, a fixed threshold would ignore it",
        )


@dataclass
class CLTKConfig(SparsifierConfig):
    _target_: str = "gradsync.compressors.cltk.CLTKCompressor"


@dataclass
class DEFTConfig(SparsifierConfig):
    _target_: str = "gradsync.compressors.deft.DEFTCompressor"
    exact_k: bool = False
    """false: the authors' floor rounding (the local k's may pass k by the layers forced up to
    one element); true: they add up to exactly k whenever k >= the number of layers with a
    non-zero gradient norm."""


@dataclass
class DGCConfig(SparsifierConfig):
    _target_: str = "gradsync.compressors.dgc.DGCCompressor"
    applies_momentum: ClassVar[bool] = True
    keeps_own_residual: ClassVar[bool] = True
    density: float = 0.001
    """DGC's 99.9% sparsity."""
    warmup_epochs: int = 4
    """DGC warms up over 4 epochs (0.25, 0.063, 0.016, 0.004, then density); 0: off."""
    momentum: float = II("trainer.momentum")
    """m of the momentum correction u ← m·u + g, v ← v + u: the job's trainer.momentum by
    default, which DGC applies itself (the optimizer then steps without momentum)."""
    clip_norm: float | None = None
    """Local gradient clipping: each worker rescales its gradient (the group's, one L2 norm over
    all its tensors) to at most clip_norm·N^(-1/2) for N workers before accumulating it;
    null: off."""
    exchange: str = "allgather"
    """allgather: values and indices of each worker's top-k (GRACE's DGC); union: all-reduce
    values at the union of the workers' indices."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_exchange(self.exchange, "dgc")
        require(
            0 <= self.momentum < 1,
            f"compressor.momentum must be in [0, 1), got {self.momentum}",
        )
        require(
            self.clip_norm is None or self.clip_norm > 0,
            f"compressor.clip_norm must be > 0 or null (off), got {self.clip_norm}",
        )


SCHEMAS: dict[str, dict[str, type]] = {
    "compressor": {
        "topk": TopKConfig,
        "threshold": ThresholdConfig,
        "cltk": CLTKConfig,
        "deft": DEFTConfig,
        "dgc": DGCConfig,
    }
}
