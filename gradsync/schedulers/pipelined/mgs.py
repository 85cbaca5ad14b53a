"""``scheduler=mgs``: MGS-SGD as the official OMGS code ships it. Walking from the output layer,
tensors join a group until it holds at least ``threshold`` elements."""

from __future__ import annotations

from typing_extensions import Unpack

from gradsync.algorithms.merge_plans import Plan, threshold_groups
from gradsync.schedulers.engine.engine import EngineParts
from gradsync.schedulers.pipelined.config import MGS_THRESHOLD
from gradsync.schedulers.pipelined.pipelined import Measurements, PipelinedSync


class ThresholdPlanner:
    profile_steps = 0

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold

    def plan(self, job: Measurements) -> tuple[Plan, dict[str, float]]:
        return threshold_groups(job.sizes, self.threshold), {}


class MgsSync(PipelinedSync):
    def __init__(self, *, threshold: int = MGS_THRESHOLD, **parts: Unpack[EngineParts]) -> None:
        super().__init__(planner=ThresholdPlanner(threshold), **parts)
