"""Per-step measurements averaged over a log window, then over workers."""

from __future__ import annotations

from collections import defaultdict


class MetricsWindow:
    """Accumulates per-step values; ``means()`` returns their averages and resets."""

    def __init__(self) -> None:
        self._sums: dict[str, float] = defaultdict(float)
        self._steps = 0

    def add(self, values: dict[str, float]) -> None:
        for key, value in values.items():
            self._sums[key] += value
        self._steps += 1

    @property
    def steps(self) -> int:
        return self._steps

    def means(self) -> dict[str, float]:
        means = {k: v / self._steps for k, v in self._sums.items()} if self._steps else {}
        self._sums = defaultdict(float)
        self._steps = 0
        return means
