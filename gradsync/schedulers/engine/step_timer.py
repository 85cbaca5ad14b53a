"""Timing a step without stopping it: marks are taken while the step runs (inside backward and
its hooks too) and turned into seconds only when the step's times are read.

On CUDA a mark is an event recorded on the current stream, so taking one costs no host sync;
reading waits for the last mark's event. On the CPU a mark is the wall clock. Timings that feed
a plan (profiles, cost fits) need finished work at the moment they are taken and use the
scheduler's synchronizing clock instead.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

import torch

Mark = float | torch.cuda.Event


class StepTimer:
    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self._spans: dict[str, list[tuple[Mark, Mark]]] = defaultdict(list)

    def mark(self) -> Mark:
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def add(self, name: str, start: Mark, end: Mark) -> None:
        """Count the time from ``start`` to ``end`` under ``name`` (spans of a name add up)."""
        self._spans[name].append((start, end))

    @contextmanager
    def span(self, name: str) -> Iterator[None]:
        start = self.mark()
        try:
            yield
        finally:
            self.add(name, start, self.mark())

    def read(self) -> dict[str, float]:
        """Seconds per name since the last read (0.0 for a name never added); starts anew."""
        spans, self._spans = self._spans, defaultdict(list)
        return defaultdict(
            float, {name: sum(_seconds(a, b) for a, b in pairs) for name, pairs in spans.items()}
        )


class Elapsed:
    """Seconds from one CUDA mark to another, plus ``offset``: read (a wait for the end's
    event) only when converted with ``float()``, as a metrics window does once per window."""

    def __init__(self, start: Mark, end: Mark, offset: float) -> None:
        self.start, self.end, self.offset = start, end, offset

    def __float__(self) -> float:
        return _seconds(self.start, self.end) + self.offset


def elapsed(start: Mark, end: Mark, offset: float = 0.0) -> float | Elapsed:
    """The seconds from ``start`` to ``end`` plus ``offset``; on CUDA not yet read."""
    if isinstance(start, float) and isinstance(end, float):
        return end - start + offset
    return Elapsed(start, end, offset)


def _seconds(start: Mark, end: Mark) -> float:
    if isinstance(start, float) and isinstance(end, float):
        return end - start
    assert isinstance(start, torch.cuda.Event) and isinstance(end, torch.cuda.Event)
    end.synchronize()
    return float(start.elapsed_time(end)) / 1e3  # milliseconds
