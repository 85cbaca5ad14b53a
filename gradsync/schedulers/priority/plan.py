"""A priority scheduler's plan: the partitions of the backward-ordered flat gradient, the
order they are sent in, and what the gradient hooks need to know about them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gradsync.schedulers.engine.buckets import Buckets


@dataclass(frozen=True)
class Plan:
    """The partitions of the backward-ordered flat gradient and the order they are sent in."""

    buckets: Buckets
    order: tuple[int, ...]
    """Partition indices, the highest priority first."""

    def __post_init__(self) -> None:
        if sorted(self.order) != list(range(len(self.buckets))):
            raise ValueError("a plan's order must list every partition once")


def input_first(buckets: Buckets) -> Plan:
    """ByteScheduler's priority: the partition nearest the input (the last one) first."""
    return Plan(buckets, tuple(reversed(range(len(buckets)))))


class Layout:
    """What the hooks need to know about a plan, computed once per plan."""

    def __init__(self, plan: Plan, sizes: Sequence[int]) -> None:
        self.plan = plan
        self.buckets = plan.buckets
        count = len(plan.buckets)
        self.rank = [0] * count  # position of each partition in the send order
        for position, bucket in enumerate(plan.order):
            self.rank[bucket] = position
        overlaps = plan.buckets.overlaps(sizes)
        self.buckets_of = [[b for b, _ in parts] for parts in overlaps]
        self.pieces: list[list[int]] = [[] for _ in range(count)]
        self.after = [len(sizes)] * count
        for tensor, parts in enumerate(overlaps):
            for bucket, elements in parts:
                self.pieces[bucket].append(elements)
                self.after[bucket] = min(self.after[bucket], tensor)
        self.tensors_in = [len(p) for p in self.pieces]
