"""Options of the pipelined schedulers (wfbp, lags, mgs, omgs), each default defined here once.
Torch-free: the command line checks them before anything is imported."""

from __future__ import annotations

from dataclasses import dataclass

from gradsync.config.files import json_object_problem
from gradsync.config.schema import require

OMGS_RULE_NAMES = ("paper", "code", "safe", "optimal")
BUCKET_MB, FIRST_BUCKET_MB = 25.0, 1.0  # DDP's bucket sizes (bucket_cap_mb, its first bucket)
MGS_THRESHOLD = 8192  # elements; the default of the OMGS authors' scripts (horovod_mpi.sh)


@dataclass
class WfbpSchedulerConfig:
    _target_: str = "gradsync.schedulers.pipelined.wfbp.WfbpSync"
    _partial_: bool = True
    bucket_mb: float = BUCKET_MB
    """Bucket size in MiB (DDP's default): gradients are all-reduced a bucket at a time."""
    first_bucket_mb: float = FIRST_BUCKET_MB
    """The first bucket (output side) is smaller, as in DDP, so communication starts early."""

    def __post_init__(self) -> None:
        require(self.bucket_mb > 0, f"scheduler.bucket_mb must be > 0, got {self.bucket_mb}")
        require(
            self.first_bucket_mb > 0,
            f"scheduler.first_bucket_mb must be > 0, got {self.first_bucket_mb}",
        )


@dataclass
class LagsSchedulerConfig:
    _target_: str = "gradsync.schedulers.pipelined.lags.LagsSync"
    _partial_: bool = True


@dataclass
class MgsSchedulerConfig:
    _target_: str = "gradsync.schedulers.pipelined.mgs.MgsSync"
    _partial_: bool = True
    threshold: int = MGS_THRESHOLD
    """Elements a group collects (from the output layer on) before it is closed."""

    def __post_init__(self) -> None:
        require(self.threshold >= 1, f"scheduler.threshold must be >= 1, got {self.threshold}")


@dataclass
class OmgsSchedulerConfig:
    _target_: str = "gradsync.schedulers.pipelined.omgs.OmgsSync"
    _partial_: bool = True
    rule: str = "paper"
    """paper (Q3 ∧ Q5), code (the official code's test), safe (never worse than no merging) or
    optimal (exact under the cost model)."""
    profile_steps: int = 5
    """Steps measured (after a first warm-up step) before the groups are planned."""
    costs: str | None = None
    """A JSON file with fitted gamma, alpha and beta to use instead of measuring them."""

    def __post_init__(self) -> None:
        require(
            self.rule in OMGS_RULE_NAMES,
            f"unknown scheduler.rule '{self.rule}'; valid: {', '.join(OMGS_RULE_NAMES)}",
        )
        require(
            self.profile_steps >= 1,
            f"scheduler.profile_steps must be >= 1, got {self.profile_steps}",
        )
        if self.costs is not None:
            problem = json_object_problem(
                self.costs,
                "scheduler.costs",
                ("gamma", "alpha", "beta"),
                "a JSON file of fitted gamma, alpha and beta, as a run logs them",
            )
            require(problem is None, str(problem))


SCHEMAS: dict[str, dict[str, type]] = {
    "scheduler": {
        "wfbp": WfbpSchedulerConfig,
        "lags": LagsSchedulerConfig,
        "mgs": MgsSchedulerConfig,
        "omgs": OmgsSchedulerConfig,
    }
}
