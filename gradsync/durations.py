"""Seconds measured between marks, read only when needed.

A mark is the wall clock on the CPU and a recorded event on CUDA. ``Seconds`` adds and subtracts
spans between marks without reading them: reading a CUDA event waits for the device to reach
it, which a training step must not do to time itself (a metrics window reads them once every
``log_every`` steps).
"""

from __future__ import annotations

import torch

Mark = float | torch.cuda.Event


class Seconds:
    """A signed sum of spans between CUDA events plus a constant, in seconds; adds and
    subtracts with floats and with other ``Seconds`` without reading any event."""

    __slots__ = ("constant", "spans")

    def __init__(
        self, spans: tuple[tuple[int, Mark, Mark], ...] = (), constant: float = 0.0
    ) -> None:
        self.spans = spans
        """(sign, start, end) of each span."""
        self.constant = constant

    def __float__(self) -> float:
        return self.constant + sum(sign * span_seconds(a, b) for sign, a, b in self.spans)

    def __add__(self, other: Duration) -> Seconds:
        if isinstance(other, Seconds):
            return Seconds(self.spans + other.spans, self.constant + other.constant)
        return Seconds(self.spans, self.constant + float(other))

    __radd__ = __add__

    def __neg__(self) -> Seconds:
        return Seconds(tuple((-sign, a, b) for sign, a, b in self.spans), -self.constant)

    def __sub__(self, other: Duration) -> Seconds:
        return self + (-other if isinstance(other, Seconds) else -float(other))

    def __rsub__(self, other: Duration) -> Seconds:
        return -self + other


Duration = float | Seconds
"""Seconds: a float, or (on CUDA) spans between events read when converted with ``float()``."""


def span_seconds(start: Mark, end: Mark) -> float:
    """The seconds from ``start`` to ``end`` (on CUDA: once the end's event is reached)."""
    if isinstance(start, float) and isinstance(end, float):
        return end - start
    assert isinstance(start, torch.cuda.Event) and isinstance(end, torch.cuda.Event)
    end.synchronize()
    return float(start.elapsed_time(end)) / 1e3  # milliseconds
