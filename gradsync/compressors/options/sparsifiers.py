"""Schemas of the sparsifiers that select by magnitude: topk, threshold, cltk, deft, dgc."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from omegaconf import II

from gradsync.compressors.choices import DGC_SELECTIONS, EXCHANGES, SCOPES
from gradsync.compressors.options.base import (
    SparsifierConfig,
    density_option,
    warmup_epochs_option,
)
from gradsync.config.checks import Rule, option

MAX_THRESHOLD = 1e6
"""No gradient element of a run that trains reaches it: a larger λ sends nothing."""
MAX_CLIP_NORM = 1e6
"""No gradient norm of a run that trains reaches it: a larger clip_norm clips nothing."""


def _exchange_problem(compressor: str) -> Callable[[str], str | None]:
    """Why an ``exchange`` is not one a sparsifier can use (the workers' indices differ, so
    values cannot be summed elementwise), or None."""

    def problem(exchange: str) -> str | None:
        if exchange == "allreduce":
            return (
                f"compressor.exchange=allreduce is not valid for {compressor}: every worker "
                "selects different indices, so values cannot be summed elementwise; valid: "
                f"{', '.join(EXCHANGES)}"
            )
        if exchange not in EXCHANGES:
            return f"unknown compressor.exchange {exchange!r}; valid: {', '.join(EXCHANGES)}"
        return None

    return problem


class _ExchangedConfig(SparsifierConfig):
    """A sparsifier whose workers select different indices: its values add up only on the
    union of the workers' indices (``exchange=union``)."""

    add_up_with: ClassVar[str] = "compressor.exchange=union"
    exchange: str

    def adds_up(self) -> bool:
        return self.exchange == "union"


@dataclass
class TopKConfig(_ExchangedConfig):
    """Top-k with error feedback: the k = density * n largest-magnitude elements.
    exchange=union (all-gather indices, all-reduce values on the union: builds up density
    with workers) or allgather (values + indices); scope=global (whole model) or layer (per
    tensor)."""

    _target_: str = "gradsync.compressors.topk.TopKCompressor"
    exchange: str = option("union", problem=_exchange_problem("topk"))
    """union: all-gather indices, all-reduce values on their union (DEFT's baseline);
    allgather: all-gather values and indices (GRACE/OMGS)."""
    scope: str = option("global", choices=SCOPES)
    """global: k over the whole group (the whole model under scheduler=allreduce); layer:
    k_l = max(1, int(density * n_l)) per tensor."""


@dataclass
class ThresholdConfig(_ExchangedConfig):
    """Hard threshold: every element with |x| >= threshold. Unset threshold:
    1/(2*sqrt(density*n))."""

    _target_: str = "gradsync.compressors.threshold.ThresholdCompressor"
    density: float = density_option(0.001)
    """Used only to derive the threshold when it is unset: λ = 1/(2·sqrt(int(density·n_g)))."""
    threshold: float | None = option(None, at_least=0, limit=MAX_THRESHOLD)
    """λ: elements with |x| >= λ are sent. Fixed for the whole run."""
    exchange: str = option("union", problem=_exchange_problem("threshold"))
    """union: all-gather indices, all-reduce values on their union (DEFT's baseline);
    allgather: all-gather values and indices."""

    RULES: ClassVar[tuple[Rule, ...]] = (
        *SparsifierConfig.RULES,
        Rule(
            lambda o: o.threshold is None or o.warmup_epochs == 0,
            lambda o: (
                "compressor.warmup_epochs needs compressor.threshold unset: the warm-up's "
                "density sets λ, a fixed threshold would ignore it"
            ),
        ),
    )


@dataclass
class CLTKConfig(SparsifierConfig):
    """CLT-k: the leader (step mod n) selects top-k and broadcasts the indices; all send
    values there."""

    _target_: str = "gradsync.compressors.cltk.CLTKCompressor"
    payloads_add_up: ClassVar[bool] = True


@dataclass
class DEFTConfig(SparsifierConfig):
    """DEFT: norm-proportional local k per layer, layers bin-packed onto workers (each
    selects only in its own layers), disjoint indices all-gathered, values all-reduced.
    Density stays at the setup."""

    _target_: str = "gradsync.compressors.deft.DEFTCompressor"
    payloads_add_up: ClassVar[bool] = True
    exact_k: bool = False
    """false: the authors' floor rounding (the local k's may pass k by the layers forced up to
    one element); true: they add up to exactly k whenever k >= the number of layers with a
    non-zero gradient norm."""


@dataclass
class DGCConfig(_ExchangedConfig):
    """Deep Gradient Compression: local clipping (clip_norm, off by default), momentum
    correction (u ← m·u + g, v ← v + u), the top share of |v| in every tensor sent
    (allgather), u and v zeroed where sent, and the density warmed up from 0.25 over the first
    4 epochs. DGC applies the momentum itself (compressor.momentum, trainer.momentum by
    default): the optimizer steps without any. It is its own error feedback (feedback=auto
    keeps no residual; feedback=residual is refused)."""

    _target_: str = "gradsync.compressors.dgc.DGCCompressor"
    applies_momentum: ClassVar[bool] = True
    keeps_own_residual: ClassVar[bool] = True
    density: float = density_option(0.001)
    """DGC's 99.9% sparsity."""
    warmup_epochs: int = warmup_epochs_option(4)
    """DGC warms up over 4 epochs (0.25, 0.063, 0.016, 0.004, then density); 0: off."""
    momentum: float = option(II("trainer.momentum"), at_least=0, below=1)
    """m of the momentum correction u ← m·u + g, v ← v + u: the job's trainer.momentum by
    default, which DGC applies itself (the optimizer then steps without momentum)."""
    clip_norm: float | None = option(None, above=0, null_means="off", limit=MAX_CLIP_NORM)
    """Local gradient clipping: each worker rescales its gradient (one L2 norm over all of it,
    every tensor) to at most clip_norm·N^(-1/2) for N workers before accumulating it; where the
    scheduler cuts the model into several groups, the norm is the previous step's; null: off."""
    selection: str = option("per_tensor", choices=DGC_SELECTIONS)
    """per_tensor: the top density share of |v| in every tensor, the paper's per-layer
    threshold; group: the top-k of each group the scheduler hands over (the whole model under
    scheduler=allreduce)."""
    exchange: str = option("allgather", problem=_exchange_problem("dgc"))
    """allgather: values and indices of each worker's top-k (GRACE's DGC); union: all-reduce
    values at the union of the workers' indices."""
