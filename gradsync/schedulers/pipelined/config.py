"""Options of the pipelined schedulers (wfbp, lags, mgs, omgs), each default defined here once.
Torch-free: the command line checks them before anything is imported."""

from __future__ import annotations

from dataclasses import dataclass

from gradsync.config.checks import MAX_ELEMENTS, MAX_PROFILE_STEPS, option
from gradsync.schedulers.options import SchedulerOptions

OMGS_RULE_NAMES = ("paper", "code", "safe", "optimal")
BUCKET_MB, FIRST_BUCKET_MB = 25.0, 1.0  # DDP's bucket sizes (bucket_cap_mb, its first bucket)
MGS_THRESHOLD = 8192  # elements; the default of the OMGS authors' scripts (horovod_mpi.sh)
OMGS_RULE = "paper"
OMGS_PROFILE_STEPS = 5
MAX_BUCKET_MB = 1_000_000.0  # a terabyte: larger than any model, so a typo


@dataclass
class WfbpSchedulerConfig(SchedulerOptions):
    _target_: str = "gradsync.schedulers.pipelined.wfbp.WfbpSync"
    bucket_mb: float = option(BUCKET_MB, above=0, limit=MAX_BUCKET_MB)
    """Bucket size in MiB (DDP's default): gradients are all-reduced a bucket at a time."""
    first_bucket_mb: float = option(FIRST_BUCKET_MB, above=0, limit=MAX_BUCKET_MB)
    """The first bucket (output side) is smaller, as in DDP, so communication starts early."""


@dataclass
class LagsSchedulerConfig(SchedulerOptions):
    """Every tensor is its own group: nothing to set."""

    _target_: str = "gradsync.schedulers.pipelined.lags.LagsSync"


@dataclass
class MgsSchedulerConfig(SchedulerOptions):
    _target_: str = "gradsync.schedulers.pipelined.mgs.MgsSync"
    threshold: int = option(MGS_THRESHOLD, at_least=1, limit=MAX_ELEMENTS)
    """Elements a group collects (from the output layer on) before it is closed."""


@dataclass
class OmgsSchedulerConfig(SchedulerOptions):
    _target_: str = "gradsync.schedulers.pipelined.omgs.OmgsSync"
    rule: str = option(OMGS_RULE, choices=OMGS_RULE_NAMES)
    """paper (Q3 ∧ Q5), code (the official code's test), safe (never worse than no merging) or
    optimal (exact under the cost model)."""
    profile_steps: int = option(OMGS_PROFILE_STEPS, at_least=1, limit=MAX_PROFILE_STEPS)
    """Steps measured (after a first warm-up step) before the groups are planned."""
    costs: str | None = option(
        None,
        json_fields=("gamma", "alpha", "beta"),
        json_what="a JSON file of fitted gamma, alpha and beta, as a run logs them",
    )
    """A JSON file with fitted gamma, alpha and beta (and delta, the engine's seconds per group;
    0 when absent) to use instead of measuring them."""
