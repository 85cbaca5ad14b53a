"""The DeFT scheduler's solvers (docs/methods/schedulers/deft.md, "The knapsacks" and "Two
links"): which buckets to communicate in a time window.

Weight equals profit (a bucket's communication time), so a knapsack here is subset-sum: fill a
window as fully as possible without overflowing it. All functions are pure and return the
chosen bucket indices, sorted.

* ``naive_knapsack``: exact, by dynamic programming over times discretised to ``unit`` seconds
  (rounded up, so a chosen set always fits in real time).
* ``two_link_greedy``: the paper's heuristic for two links (Problem 2): a bucket may go on the
  fast link (cost c) or the slow one (cost μ·c), each with capacity T; smallest sack first,
  largest items first. ``two_link_exact`` enumerates all 3^N assignments (test oracle, N ≤ 12).
* ``recursive_knapsack``: Algorithm 1 for the backward stage: the best of filling the window now
  and of giving up the earliest-ready bucket to the time its backward takes.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_UNIT = 1e-5  # 10 µs


def _ticks(seconds: float, unit: float) -> int:
    return math.ceil(seconds / unit - 1e-9)


def naive_knapsack(
    costs: Sequence[float], capacity: float, *, unit: float = DEFAULT_UNIT
) -> list[int]:
    """Indices of a subset with the largest total cost that fits in ``capacity`` (exact for the
    costs rounded up to whole ``unit``s)."""
    if capacity <= 0:
        return []
    if sum(costs) <= capacity:  # everything fits (also an unlimited window)
        return list(range(len(costs)))
    cap = int(capacity / unit + 1e-9)
    weights = [_ticks(c, unit) for c in costs]
    # best[w]: the item set (as a bitmask over items) reaching total weight w exactly.
    reachable: dict[int, int] = {0: 0}
    for i, w in enumerate(weights):
        if w > cap:
            continue
        for total, chosen in list(reachable.items()):
            new = total + w
            if new <= cap and new not in reachable:
                reachable[new] = chosen | (1 << i)
    best = reachable[max(reachable)]
    return [i for i in range(len(costs)) if best >> i & 1]


@dataclass(frozen=True)
class TwoLinks:
    fast: list[int]
    """Buckets sent on the fast link (NCCL in the paper)."""
    slow: list[int]
    """Buckets sent on the slow link (gloo), each taking ``mu`` times as long."""

    def value(self, costs: Sequence[float]) -> float:
        return sum(costs[i] for i in (*self.fast, *self.slow))


def two_link_greedy(costs: Sequence[float], capacity: float, mu: float) -> TwoLinks:
    """The paper's heuristic: measured in fast-link time, the slow sack holds ``capacity / mu``;
    sacks by capacity ascending, items by cost descending, each item into the first sack it
    still fits in."""
    sacks = sorted([("slow", capacity / mu), ("fast", capacity)], key=lambda s: s[1])
    room = dict(sacks)
    chosen: dict[str, list[int]] = {"fast": [], "slow": []}
    order = sorted(range(len(costs)), key=lambda i: -costs[i])
    for name, _ in sacks:
        for i in order:
            taken = any(i in items for items in chosen.values())
            if not taken and costs[i] <= room[name] + 1e-12:
                chosen[name].append(i)
                room[name] -= costs[i]
    return TwoLinks(sorted(chosen["fast"]), sorted(chosen["slow"]))


def two_link_exact(costs: Sequence[float], capacity: float, mu: float) -> TwoLinks:
    """Every assignment of each bucket to fast, slow or neither (3^N): the oracle."""
    best: TwoLinks | None = None
    for where in itertools.product((0, 1, 2), repeat=len(costs)):
        fast = [i for i, w in enumerate(where) if w == 1]
        slow = [i for i, w in enumerate(where) if w == 2]
        if sum(costs[i] for i in fast) > capacity + 1e-12:
            continue
        if mu * sum(costs[i] for i in slow) > capacity + 1e-12:
            continue
        candidate = TwoLinks(fast, slow)
        if best is None or candidate.value(costs) > best.value(costs):
            best = candidate
    assert best is not None
    return best


def recursive_knapsack(
    costs: Sequence[float],
    backward: Sequence[float],
    capacity: float,
    *,
    unit: float = DEFAULT_UNIT,
) -> list[int]:
    """Algorithm 1 over buckets listed in backward order (index 0 ready first), the input-side
    bucket already left out by the caller: ``o1`` fills ``capacity`` from all of them; ``o2``
    drops the earliest-ready bucket and the time ``backward[1]`` of the next one's backward,
    during which nothing can be sent. The larger total wins; ties go to ``o2``."""
    if not costs or capacity <= 0:
        return []
    first = naive_knapsack(costs, capacity, unit=unit)
    later = recursive_knapsack(
        costs[1:], backward[1:], capacity - backward[1] if len(backward) > 1 else 0.0, unit=unit
    )
    later = [i + 1 for i in later]
    value = sum(costs[i] for i in first)
    return first if value > sum(costs[i] for i in later) else later
