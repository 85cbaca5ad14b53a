"""Cost models of the pipelined sparse schedulers, and fitting them to measurements
(docs/methods/index.md, "Merged sparse groups: the OMGS timeline").

* selection (top-k) time ``TKPM(d) = γ·ρ·d·log2 d`` for a group of d elements;
* exchange (all-gather) time ``AGPM(d) = α + β·bytes``, bytes = what one worker sends for the
  group: ρ·d (value, index) pairs for a sparsifier, d values for a dense all-reduce.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class CostModel:
    gamma: float
    """Seconds per ρ·d·log2(d) of top-k selection."""
    alpha: float
    """Start-up seconds of one exchange."""
    beta: float
    """Seconds per byte of one exchange."""
    density: float
    bytes_per_element: float = 8.0
    """Bytes one selected element costs on the wire (float32 value + int32 index)."""

    def select_seconds(self, d: int) -> float:
        if d <= 1 or self.density >= 1.0:  # dense: nothing to select
            return 0.0
        return self.gamma * self.density * d * math.log2(d)

    def wire_bytes(self, d: int) -> float:
        return max(1, int(self.density * d)) * self.bytes_per_element if d else 0.0

    def comm_seconds(self, d: int) -> float:
        return self.alpha + self.beta * self.wire_bytes(d) if d else 0.0

    def min_comm_seconds(self, d: int) -> float:
        """A lower bound of the total exchange time of d elements split into any number of
        groups: one start-up, and the bytes less the rounding of each group (a group costs at
        least α + β·(ρ·d_g − 1)·bytes, and α ≥ β·bytes_per_element in any sane fit)."""
        if not d:
            return 0.0
        rounding = 1.0 if self.alpha >= self.beta * self.bytes_per_element else float(d)
        return self.alpha + self.beta * self.bytes_per_element * max(
            self.density * d - rounding, 0.0
        )

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def fit_gamma(sizes: Sequence[int], seconds: Sequence[float], density: float) -> float:
    """Least-squares γ (through the origin) of ``seconds ≈ γ·ρ·d·log2 d``."""
    x = [density * d * math.log2(d) for d in sizes]
    denominator = sum(v * v for v in x)
    if denominator == 0:
        raise ValueError("fit_gamma needs sizes above 1")
    return max(sum(v * t for v, t in zip(x, seconds, strict=True)) / denominator, 0.0)


def fit_alpha_beta(nbytes: Sequence[float], seconds: Sequence[float]) -> tuple[float, float]:
    """Least-squares (α, β) of ``seconds ≈ α + β·bytes``, both clamped at 0 (a noisy fit can
    otherwise give a negative start-up time)."""
    n = len(nbytes)
    if n < 2 or len(set(nbytes)) < 2:
        raise ValueError("fit_alpha_beta needs at least two different sizes")
    mean_x, mean_t = sum(nbytes) / n, sum(seconds) / n
    sxx = sum((x - mean_x) ** 2 for x in nbytes)
    sxt = sum((x - mean_x) * (t - mean_t) for x, t in zip(nbytes, seconds, strict=True))
    beta = max(sxt / sxx, 0.0)
    return max(mean_t - beta * mean_x, 0.0), beta
