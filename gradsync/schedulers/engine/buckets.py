"""Buckets for communication scheduling (DeFT, ByteScheduler, US-Byte): contiguous element ranges
of the gradient flattened in backward order (the reverse of ``model.parameters()``), so bucket 0
is on the output side and is ready first. Unlike merge groups, a bucket may cut through a
tensor, so any bucket can be split further when its communication is too long for a window.

Also how per-tensor timings become per-bucket ones, and how a forward pass is timed per tensor
(module hooks: a module's own time, without its children's, shared by its parameters).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from torch import nn

from gradsync.schedulers.engine.hooks import ModelHooks, hook_model


@dataclass(frozen=True)
class Buckets:
    bounds: tuple[int, ...]
    """Element offsets: bucket b is ``[bounds[b], bounds[b + 1])`` of the flat gradient."""

    def __post_init__(self) -> None:
        b = self.bounds
        if len(b) < 2 or b[0] != 0 or any(x >= y for x, y in itertools.pairwise(b)):
            raise ValueError(f"bucket bounds must rise from 0, got {b}")

    @classmethod
    def partition(cls, sizes: Sequence[int], partition_size: int) -> Buckets:
        """Tensors in backward order, a bucket closed once it holds ``partition_size`` elements;
        a tensor larger than that is cut into pieces of ``partition_size``."""
        if partition_size < 1:
            raise ValueError(f"partition_size must be >= 1, got {partition_size}")
        bounds, start = [0], 0
        for size in sizes:
            end = start + size
            while end - bounds[-1] >= partition_size:
                bounds.append(bounds[-1] + partition_size)
            start = end
        if bounds[-1] != start:
            bounds.append(start)
        return cls(tuple(bounds))

    @classmethod
    def of_groups(cls, sizes: Sequence[int], plan: Sequence[int]) -> Buckets:
        """A bucket per group of whole tensors: ``plan[g]`` tensors (in backward order) each."""
        offsets = [0, *itertools.accumulate(sizes)]
        return cls(tuple(offsets[end] for end in itertools.accumulate(plan, initial=0)))

    def __len__(self) -> int:
        return len(self.bounds) - 1

    @property
    def total(self) -> int:
        return self.bounds[-1]

    def numel(self, bucket: int) -> int:
        return self.bounds[bucket + 1] - self.bounds[bucket]

    def slice(self, bucket: int) -> slice:
        return slice(self.bounds[bucket], self.bounds[bucket + 1])

    def split(self, bucket: int, pieces: int) -> Buckets:
        """Bucket ``bucket`` cut into ``pieces`` near-equal ones (at most one per element)."""
        lo, hi = self.bounds[bucket], self.bounds[bucket + 1]
        pieces = max(1, min(pieces, hi - lo))
        inner = [lo + (hi - lo) * k // pieces for k in range(1, pieces)]
        return Buckets((*self.bounds[: bucket + 1], *inner, *self.bounds[bucket + 1 :]))

    def refine(self, comm: Sequence[float], limit: float) -> Buckets:
        """Every bucket whose communication takes longer than ``limit`` split into as many pieces
        as make each fit (assuming time proportional to size)."""
        result = self
        for bucket in reversed(range(len(self))):  # from the end, so indices stay valid
            if comm[bucket] > limit > 0:
                result = result.split(bucket, math.ceil(comm[bucket] / limit))
        return result

    def overlaps(self, sizes: Sequence[int]) -> list[list[tuple[int, int]]]:
        """For each tensor (backward order), the buckets it overlaps and how many of its
        elements fall in each."""
        result, bucket, start = [], 0, 0
        for size in sizes:
            end, parts = start + size, []
            while bucket < len(self) and self.bounds[bucket] < end:
                lo, hi = max(start, self.bounds[bucket]), min(end, self.bounds[bucket + 1])
                parts.append((bucket, hi - lo))
                if self.bounds[bucket + 1] > end:
                    break
                bucket += 1
            result.append(parts)
            start = end
        return result

    def spread(self, per_tensor: Sequence[float], sizes: Sequence[int]) -> list[float]:
        """Per-bucket totals of a per-tensor quantity (a time), each tensor's share in
        proportion to its elements in the bucket."""
        totals = [0.0] * len(self)
        for value, size, parts in zip(per_tensor, sizes, self.overlaps(sizes), strict=True):
            for bucket, count in parts:
                totals[bucket] += value * count / size
        return totals


class ForwardTimer:
    """Per-tensor forward seconds from module hooks: each module's own time (its children's
    left out) shared among its direct parameters by size, then scaled so the tensors' total is
    the whole forward pass (time spent in modules without parameters, activations and
    pooling, is spread the same way)."""

    def __init__(
        self, model: nn.Module, params: Sequence[nn.Parameter], clock: Callable[[], float]
    ) -> None:
        self.clock = clock
        self._index = {id(p): i for i, p in enumerate(params)}
        self._sizes = [p.numel() for p in params]
        self.seconds = [0.0] * len(params)
        self._stack: list[list[float]] = []  # [start, time spent in children]
        own = {
            id(module): [p for p in module.parameters(recurse=False) if id(p) in self._index]
            for module in model.modules()
        }
        hooks = ModelHooks(
            before_module=self._enter,
            after_module=lambda module: self._exit(own[id(module)]),
            modules=lambda module: bool(own[id(module)]),
        )
        self._hooked = hook_model(model, params, hooks)

    def _enter(self, *_: object) -> None:
        self._stack.append([self.clock(), 0.0])

    def _exit(self, own: Iterable[nn.Parameter]) -> None:
        start, children = self._stack.pop()
        inclusive = self.clock() - start
        if self._stack:
            self._stack[-1][1] += inclusive
        params = list(own)
        total = sum(p.numel() for p in params)
        for p in params:
            self.seconds[self._index[id(p)]] += (inclusive - children) * p.numel() / total

    def take(self, forward_seconds: float) -> list[float]:
        """The per-tensor times since the last call, scaled to sum to ``forward_seconds``."""
        seconds, self.seconds = self.seconds, [0.0] * len(self.seconds)
        measured = sum(seconds)
        if measured <= 0:
            return [forward_seconds * s / sum(self._sizes) for s in self._sizes]
        return [s * forward_seconds / measured for s in seconds]

    def remove(self) -> None:
        self._hooked.remove()
