"""``scheduler=bytescheduler``: ByteScheduler's priority, credit-based scheduling
(docs/methods/schedulers/bytescheduler.md): the gradient cut into equal partitions of
``partition_size`` elements, sent input side first with at most ``credit`` elements in flight
(the engine: ``priority.priority.PrioritySync``)."""

from __future__ import annotations

from typing_extensions import Unpack

from gradsync.schedulers.engine.buckets import Buckets
from gradsync.schedulers.engine.engine import EngineParts
from gradsync.schedulers.priority.config import CREDIT, PARTITION_SIZE
from gradsync.schedulers.priority.plan import Plan, input_first
from gradsync.schedulers.priority.priority import PrioritySync


class ByteSchedulerSync(PrioritySync):
    def __init__(
        self,
        *,
        partition_size: int = PARTITION_SIZE,
        credit: int = CREDIT,
        **parts: Unpack[EngineParts],
    ) -> None:
        if partition_size < 1:
            raise ValueError(f"scheduler.partition_size must be >= 1, got {partition_size}")
        super().__init__(credit=credit, **parts)
        self.partition_size = partition_size

    def _first_plan(self) -> Plan:
        return input_first(Buckets.partition(self._sizes, self.partition_size))
