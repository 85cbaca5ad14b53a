"""Options of ``scheduler=deft`` (DeFT's delayed, knapsack-scheduled communication), each
default defined here once. Torch-free: the command line checks them before importing torch."""

from __future__ import annotations

from dataclasses import dataclass

from gradsync.config.files import json_object_problem
from gradsync.config.schema import require

MERGE_REDUCTIONS = ("mean", "sum")
PARTITION_SIZE = 6_500_000  # elements (≈ 25 MB of fp32, DDP's bucket): DeFT's default
DEFT_PROFILE_FIELDS = ("bounds", "forward", "backward", "comm", "mu")  # deft.BucketProfile's


@dataclass
class DeftSchedulerConfig:
    _target_: str = "gradsync.schedulers.deft.deft.DeftSync"
    _partial_: bool = True
    partition_size: int = PARTITION_SIZE
    """Elements per bucket before profiling; buckets too long to send in the forward pass are
    split further once their communication time is measured."""
    links: int = 1
    """1, or 2: a second process group sends the second knapsack concurrently (under
    runner=netem with runner.second_bandwidth, over its own shaped link)."""
    mu: float | None = None
    """How many times slower the second link is; measured when null (the paper's value: 1.65)."""
    merge_reduction: str = "mean"
    """How gradients merged over several iterations are combined: mean (divide by the number
    of iterations) or sum (as the authors' code does)."""
    delay: bool = True
    """false: every gradient is sent whole in its own iteration and applied at once (WFBP)."""
    profile_steps: int = 5
    """Steps measured (after a first warm-up step, with every bucket sent as in WFBP) before
    the schedule is planned."""
    times: str | None = None
    """A JSON file with per-bucket times (as a run saves them in deft_profile.json) to use
    instead of profiling."""
    preserver: bool = True
    """Check that delaying does not cost convergence; enlarge the knapsacks until it does not."""
    epsilon: float = 0.01
    preserver_retries: int = 10

    def __post_init__(self) -> None:
        require(
            self.partition_size >= 1,
            f"scheduler.partition_size must be >= 1, got {self.partition_size}",
        )
        require(self.links in (1, 2), f"scheduler.links must be 1 or 2, got {self.links}")
        require(
            self.mu is None or self.mu >= 1,
            f"scheduler.mu must be >= 1 (the second link's slowdown) or null, got {self.mu}",
        )
        require(
            self.merge_reduction in MERGE_REDUCTIONS,
            f"unknown scheduler.merge_reduction '{self.merge_reduction}'; valid: "
            + ", ".join(MERGE_REDUCTIONS),
        )
        require(
            self.profile_steps >= 1,
            f"scheduler.profile_steps must be >= 1, got {self.profile_steps}",
        )
        if self.times is not None:
            problem = json_object_problem(
                self.times,
                "scheduler.times",
                DEFT_PROFILE_FIELDS,
                "a deft_profile.json a run saved",
            )
            require(problem is None, str(problem))
        require(0 < self.epsilon < 1, f"scheduler.epsilon must be in (0, 1), got {self.epsilon}")
        require(
            self.preserver_retries >= 0,
            f"scheduler.preserver_retries must be >= 0, got {self.preserver_retries}",
        )


SCHEMAS: dict[str, dict[str, type]] = {"scheduler": {"deft": DeftSchedulerConfig}}
