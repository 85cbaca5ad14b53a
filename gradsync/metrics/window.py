"""Per-step measurements kept over a log window, then averaged over steps and workers."""

from __future__ import annotations

from collections import defaultdict


class MetricsWindow:
    """Accumulates per-step values; ``means()`` returns their averages and resets."""

    def __init__(self) -> None:
        self._values: dict[str, list[float]] = defaultdict(list)
        self._steps = 0

    def add(self, values: dict[str, float]) -> None:
        for key, value in values.items():
            self._values[key].append(value)
        self._steps += 1

    @property
    def steps(self) -> int:
        return self._steps

    def series(self, key: str) -> list[float]:
        """This window's per-step values of ``key``, oldest first."""
        return list(self._values.get(key, []))

    def means(self) -> dict[str, float]:
        means = {k: sum(v) / len(v) for k, v in self._values.items() if v}
        self._values = defaultdict(list)
        self._steps = 0
        return means
