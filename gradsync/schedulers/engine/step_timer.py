"""Timing a step without stopping it: marks are taken while the step runs (inside backward and
its hooks too) and turned into seconds only when they are read, which a metrics window does
once every ``log_every`` steps.

On CUDA a mark is an event recorded on the current stream, so taking one costs no host sync,
and a step's spans are kept as ``Seconds``, read (waiting for their events) only when
converted with ``float()``: a step never waits for the device to time itself. On the CPU a mark
is the wall clock and spans are plain floats. Timings that feed a plan (profiles, cost fits)
need finished work at the moment they are taken and use the scheduler's synchronizing clock
instead.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from gradsync.durations import Duration, Seconds, span_seconds
from gradsync.durations import Mark as Mark  # what a StepTimer's marks are


class StepTimer:
    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self._spans: dict[str, list[tuple[Mark, Mark]]] = defaultdict(list)
        self._seconds: dict[str, float] = defaultdict(float)
        """CPU spans, added up as they come (a scheduler adds a few per group per step)."""

    def mark(self) -> Mark:
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def add(self, name: str, start: Mark, end: Mark) -> None:
        """Count the time from ``start`` to ``end`` under ``name`` (spans of a name add up)."""
        if isinstance(start, float) and isinstance(end, float):
            self._seconds[name] += end - start
        else:
            self._spans[name].append((start, end))

    @contextmanager
    def span(self, name: str) -> Iterator[None]:
        start = self.mark()
        try:
            yield
        finally:
            self.add(name, start, self.mark())

    def read(self) -> dict[str, Duration]:
        """Seconds per name since the last call (0.0 for a name never added), starting anew:
        floats on the CPU, ``Seconds`` not yet read on CUDA."""
        spans, self._spans = self._spans, defaultdict(list)
        seconds: dict[str, Duration] = defaultdict(float, self._seconds)
        self._seconds = defaultdict(float)
        for name, pairs in spans.items():
            seconds[name] = Seconds(tuple((1, a, b) for a, b in pairs)) + seconds[name]
        return seconds


class Elapsed:
    """Seconds from one CUDA mark to another, plus ``offset``: read (a wait for the end's
    event) only when converted with ``float()``, as a metrics window does once per window."""

    def __init__(self, start: Mark, end: Mark, offset: Duration) -> None:
        self.start, self.end, self.offset = start, end, offset

    def __float__(self) -> float:
        return span_seconds(self.start, self.end) + float(self.offset)


def elapsed(start: Mark, end: Mark, offset: Duration = 0.0) -> float | Elapsed:
    """The seconds from ``start`` to ``end`` plus ``offset``; on CUDA not yet read."""
    if isinstance(start, float) and isinstance(end, float) and isinstance(offset, float):
        return end - start + offset
    return Elapsed(start, end, offset)
