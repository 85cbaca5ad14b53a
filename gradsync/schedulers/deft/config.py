"""Options of ``scheduler=deft`` (DeFT's delayed, knapsack-scheduled communication), each
default defined here once. Torch-free: the command line checks them before importing torch."""

from __future__ import annotations

from dataclasses import dataclass

from gradsync.algorithms.preserver import EPSILON, MAX_RETRIES
from gradsync.config.checks import MAX_ELEMENTS, MAX_PROFILE_STEPS, option
from gradsync.schedulers.staleness_options import (
    CORRECTIONS,
    MOMENTUM,
    PREDICTION,
    StalenessCorrectionOptions,
)

MERGE_REDUCTIONS = ("mean", "sum")
PARTITION_SIZE = 6_500_000  # elements (≈ 25 MB of fp32, DDP's bucket): DeFT's default
MAX_MU = 1_000.0  # a second link a thousand times slower carries nothing worth planning for
MAX_RETRIES_ALLOWED = 1_000  # each retry enlarges the knapsacks ×1.1: then they hold any model
DEFT_PROFILE_FIELDS = ("bounds", "forward", "backward", "comm", "mu")  # deft.BucketProfile's
LINKS = 1
MERGE_REDUCTION = "mean"
PROFILE_STEPS = 5
# Weight prediction needs each gradient computed at other weights than those being updated; a
# DeFT worker computes at the weights its own updates land on.
DEFT_CORRECTIONS = tuple(c for c in CORRECTIONS if c != PREDICTION)
# Measured on the parity recipe (BENCHMARKS.md, "DeFT: throughput of WFBP, ByteScheduler,
# US-Byte and DeFT"): the best mean of 3 seeds, 0.4 points above WFBP (lr is close behind);
# none is the paper's updates.
DEFT_STALENESS_CORRECTION = MOMENTUM


@dataclass
class DeftSchedulerConfig(StalenessCorrectionOptions):
    _target_: str = "gradsync.schedulers.deft.deft.DeftSync"
    staleness_correction: str = option(DEFT_STALENESS_CORRECTION, choices=DEFT_CORRECTIONS)
    """momentum (the default, by measurement), none (the updates as the paper applies them),
    dc or lr (see staleness_options.py)."""
    partition_size: int = option(PARTITION_SIZE, at_least=1, limit=MAX_ELEMENTS)
    """Elements per bucket before profiling; buckets too long to send in the forward pass are
    split further once their communication time is measured."""
    links: int = option(LINKS, choices=(1, 2))
    """1, or 2: a second process group sends the second knapsack concurrently (under
    runner=netem with runner.second_bandwidth, over its own shaped link)."""
    mu: float | None = option(None, at_least=1, hint="(the second link's slowdown)", limit=MAX_MU)
    """How many times slower the second link is; measured when null (the paper's value: 1.65)."""
    merge_reduction: str = option(MERGE_REDUCTION, choices=MERGE_REDUCTIONS)
    """How gradients merged over several iterations are combined: mean (divide by the number
    of iterations) or sum (as the authors' code does)."""
    delay: bool = True
    """false: every gradient is sent whole in its own iteration and applied at once (WFBP)."""
    profile_steps: int = option(PROFILE_STEPS, at_least=1, limit=MAX_PROFILE_STEPS)
    """Steps measured (after a first warm-up step, with every bucket sent as in WFBP) before
    the schedule is planned."""
    times: str | None = option(
        None, json_fields=DEFT_PROFILE_FIELDS, json_what="a deft_profile.json a run saved"
    )
    """A JSON file with per-bucket times (as a run saves them in deft_profile.json) to use
    instead of profiling."""
    preserver: bool = True
    """Check that delaying does not cost convergence; enlarge the knapsacks until it does not."""
    epsilon: float = option(EPSILON, above=0, below=1)
    """How far (a fraction) the delayed schedule's expected loss may be from the undelayed one's."""
    preserver_retries: int = option(MAX_RETRIES, at_least=0, limit=MAX_RETRIES_ALLOWED)
    """How many times the Preserver may enlarge the knapsacks before it gives up delaying."""
