"""DeFT's Preserver (docs/methods/schedulers/deft.md, "The Preserver"): does a schedule's
delaying of updates cost convergence?

A schedule that merges k_i iterations into one update behaves like training with a variable
batch size: over one period of N iterations, updates with batches k_1·B, ..., k_m·B instead of
N updates with batch B. The loss is modelled as a Gaussian random walk with rebound at S*
(Yin et al., KDD'17): one update with batch B moves the loss s to

    E_B[s'] = (s − S* − ημ)·(Φ(a) − Φ(−a)) + (ησ/√B)·√(2/π)·exp(−a²/2) + S*,
    a = (s − S* − ημ)·√B / (ησ),

which is E|X| + S* for X ~ N(s − S* − ημ, η²σ²/B). (The extracted paper has Δs where the
expectation needs μ; corrected.) The schedule passes when the two expected losses after the
period agree within 1 ± ε.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

EPSILON = 0.01
MAX_RETRIES = 10
ENLARGE = 1.1  # capacities grow by 10% a retry (the paper leaves the increment open)


@dataclass(frozen=True)
class LossWalk:
    """The random walk's parameters, estimated from a profile window."""

    mu: float
    """Mean loss decrease per unit step: ‖g‖²."""
    sigma: float
    """Standard deviation of one sample's contribution."""
    eta: float
    """Learning rate."""
    floor: float = 0.0
    """S*, the loss the walk rebounds at."""

    def expected_after(self, loss: float, batch: float) -> float:
        drift = loss - self.floor - self.eta * self.mu
        spread = self.eta * self.sigma / math.sqrt(batch)
        if spread == 0:
            return abs(drift) + self.floor
        a = drift / spread
        within = math.erf(a / math.sqrt(2))  # Φ(a) − Φ(−a)
        return drift * within + spread * math.sqrt(2 / math.pi) * math.exp(-a * a / 2) + self.floor

    def after_updates(self, loss: float, batches: Sequence[float]) -> float:
        for batch in batches:
            loss = self.expected_after(loss, batch)
        return loss


def batch_sequence(merged: Sequence[int], batch: int) -> list[int]:
    """The variable batch sizes of a period: one update per entry, k_i·B samples."""
    return [k * batch for k in merged]


def preserver_ratio(
    walk: LossWalk, start: float, merged: Sequence[int], batch: int, iterations: int | None = None
) -> float:
    """E_OB / E_OD: N updates with batch B against the schedule's updates. N is Σk_i, or the
    ``iterations`` the schedule ran when some of them were not applied by its end (a schedule
    that holds gradients back pays for it)."""
    plain = walk.after_updates(start, [batch] * (sum(merged) if iterations is None else iterations))
    delayed = walk.after_updates(start, batch_sequence(merged, batch))
    return plain / delayed


def passes(ratio: float, epsilon: float = EPSILON) -> bool:
    return 1 - epsilon <= ratio <= 1 + epsilon


@dataclass(frozen=True)
class Decision:
    capacity_scale: float
    """How much the knapsack capacities were enlarged (1: not at all)."""
    ratio: float
    retries: int
    passed: bool


def preserve(
    schedule_for: Callable[[float], tuple[Sequence[int], int]],
    walk: LossWalk,
    start: float,
    batch: int,
    *,
    epsilon: float = EPSILON,
    retries: int = MAX_RETRIES,
) -> Decision:
    """Enlarge the capacities (×1.1 a retry, at most ``retries`` times) until the schedule that
    ``schedule_for(scale)`` gives, (k of each update, iterations they span), passes the 1 ± ε
    test; the last try is kept if none does."""
    scale = 1.0
    for attempt in range(retries + 1):
        merged, iterations = schedule_for(scale)
        ratio = preserver_ratio(walk, start, merged, batch, iterations)
        if passes(ratio, epsilon) or attempt == retries:
            return Decision(scale, ratio, attempt, passes(ratio, epsilon))
        scale *= ENLARGE
    raise AssertionError("unreachable")
