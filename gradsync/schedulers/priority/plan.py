"""A priority scheduler's plan: the partitions of the backward-ordered flat gradient, the
order they are sent in, and what the gradient hooks need to know about them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gradsync.schedulers.engine.buckets import Buckets
from gradsync.schedulers.engine.group_info import bucket_parts


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

    def __init__(self, plan: Plan, shapes: Sequence[tuple[int, ...]]) -> None:
        self.plan = plan
        self.buckets = plan.buckets
        count = len(plan.buckets)
        self.rank = [0] * count  # position of each partition in the send order
        for position, bucket in enumerate(plan.order):
            self.rank[bucket] = position
        # The flat gradient is in backward order: tensor t is the model's (last - t).
        model_index = range(len(shapes) - 1, -1, -1)
        self.parts = bucket_parts(plan.buckets, shapes, model_index)
        self.buckets_of: list[list[int]] = [[] for _ in shapes]
        self.tensors_of: list[list[int]] = [[] for _ in self.parts]
        """The tensors (backward order) each partition holds a part of."""
        for bucket, parts in enumerate(self.parts):
            for part in parts:
                tensor = len(shapes) - 1 - part.index
                self.buckets_of[tensor].append(bucket)
                self.tensors_of[bucket].append(tensor)
        self.tensors_in = [len(p) for p in self.parts]
