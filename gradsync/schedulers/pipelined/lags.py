"""``scheduler=lags``: LAGS-SGD. Every tensor is its own group, compressed (layer-wise top-k
with ``compressor=topk``) and exchanged as soon as its gradient is ready."""

from __future__ import annotations

from typing_extensions import Unpack

from gradsync.algorithms.merge_plans import Plan
from gradsync.schedulers.engine.engine import EngineParts
from gradsync.schedulers.pipelined.pipelined import Measurements, PipelinedSync


class EveryTensorPlanner:
    profile_steps = 0

    def plan(self, job: Measurements) -> tuple[Plan, dict[str, float]]:
        return (1,) * len(job.sizes), {}


class LagsSync(PipelinedSync):
    def __init__(self, **parts: Unpack[EngineParts]) -> None:
        super().__init__(planner=EveryTensorPlanner(), **parts)
