"""Cost models of the pipelined sparse schedulers, and fitting them to measurements
(docs/methods/index.md, "Merged sparse groups: the OMGS timeline").

* selection (top-k) time ``TKPM(d) = γ·ρ·d·log2 d`` for a group of d elements, plus a part
  linear in d where a cluster gives one (``per_element``);
* the engine's own work per group on the compute stream, δ: flattening the group, handing it
  to the communication thread, writing its average back (what makes many small groups cost
  more than their top-k: the paper's model has none, gradsync fits it);
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
    delta: float = 0.0
    """Seconds of the engine's own work per group on the compute stream."""
    per_element: float = 0.0
    """Seconds of selection per element, besides TKPM (a described cluster's linear cost)."""

    def select_seconds(self, d: int) -> float:
        linear = self.per_element * d
        if d <= 1 or self.density >= 1.0:  # dense: nothing to sort
            return linear
        return self.gamma * self.density * d * math.log2(d) + linear

    def group_seconds(self, d: int) -> float:
        """What a group of d elements adds to the compute stream: δ and its selection."""
        return self.delta + self.select_seconds(d)

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


def fit_gamma_delta(
    sizes: Sequence[int], seconds: Sequence[float], density: float
) -> tuple[float, float]:
    """Least-squares (γ, δ) of ``seconds ≈ δ + γ·ρ·d·log2 d``: the fixed part of each group's
    time on the compute stream and TKPM's slope, both clamped at 0 (then the other refitted)."""
    x = [density * d * math.log2(d) if d > 1 else 0.0 for d in sizes]
    n = len(x)
    if n < 2 or len(set(x)) < 2:
        raise ValueError("fit_gamma_delta needs at least two different sizes")
    mean_x, mean_t = sum(x) / n, sum(seconds) / n
    sxx = sum((v - mean_x) ** 2 for v in x)
    gamma = sum((v - mean_x) * (t - mean_t) for v, t in zip(x, seconds, strict=True)) / sxx
    delta = mean_t - gamma * mean_x
    if gamma < 0:  # no growth with size: all of it is fixed
        return 0.0, max(mean_t, 0.0)
    if delta < 0:  # no fixed part: through the origin, as TKPM alone
        return fit_gamma(sizes, seconds, density), 0.0
    return gamma, delta


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
