"""``scheduler=deft`` for ``gradsync simulate``: the discrete-event simulator on DeFT's buckets
(the job's own when known), one or two links, with the preserver's knapsack scaling."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

from gradsync.algorithms.simulator import PAPER_MU, BucketTimes, deft
from gradsync.projection.estimates import Estimate, Job
from gradsync.projection.predict import (
    SIMULATED_ITERATIONS,
    simulated,
    start_up,
)
from gradsync.schedulers.bucket_costs import bucket_times, partitioned
from gradsync.schedulers.deft.deft import PROFILE_FILE, BucketProfile
from gradsync.schedulers.engine.buckets import Buckets

if TYPE_CHECKING:
    from gradsync.algorithms.simulator import BucketTimes
    from gradsync.schedulers.deft.deft import BucketProfile


MAX_DEFT_BUCKETS = 256  # splitting further only slows the knapsacks down


def iteration(job: Job) -> Estimate:

    two_links = int(job.scheduler.links) == 2
    plan = _deft_plan(job)
    mu = _mu(job, plan) if two_links else None
    if plan is not None:  # the job's own buckets, and the times it solved its knapsacks from
        times = bucket_times(job, Buckets(plan.bounds))
        planned: BucketTimes | None = BucketTimes(plan.forward, plan.backward, plan.comm)
    else:
        times, planned = _deft_buckets(job, mu), None
    # The preserver's retries scale the knapsacks (fewer delayed buckets, more updates).
    scale = float(job.decisions.get("capacity_scale", 1.0))
    # The communication thread goes on sending while the workers step and load the next batch.
    schedule = functools.partial(
        deft,
        iterations=SIMULATED_ITERATIONS,
        mu=mu,
        capacity_scale=scale,
        planned=planned,
        between=job.between,
        update=job.profile.update,
    )
    prediction = simulated(job, schedule, times)
    return Estimate(
        prediction.iteration,
        prediction.update_frequency,
        prediction,
        includes_between=True,
        groups=len(times.comm),
    )


def _deft_buckets(job: Job, mu: float | None) -> BucketTimes:
    """DeFT's buckets as it would make them on the cluster: partitioned, then (its step 3)
    those too long for the smallest knapsack, the forward window (on the slow link when there
    are two), split."""
    buckets = partitioned(job, job.scheduler.partition_size)
    times = bucket_times(job, buckets)
    window = sum(times.forward) / max(mu or 1.0, 1.0)
    alpha = start_up(job)
    if window > alpha:
        room = max(window - alpha, sum(times.comm) / MAX_DEFT_BUCKETS)
        times = bucket_times(job, buckets.refine([c - alpha for c in times.comm], room))
    return times


def logged_plan(run_dir: Path) -> BucketProfile | None:
    """The buckets and times a DeFT run solved its schedule from (its ``deft_profile.json``);
    None for a run that never planned (its registry entry's ``plan_reader``)."""

    path = run_dir / PROFILE_FILE
    return BucketProfile.read(path) if path.exists() else None


def _deft_plan(job: Job) -> BucketProfile | None:
    """The buckets and times DeFT solves from: the job's own when known (``logged_plan``),
    else those given as ``scheduler.times``, else none (it measures them on the cluster)."""

    if job.logged_plan is not None:
        if not isinstance(job.logged_plan, BucketProfile):
            raise TypeError(f"DeFT follows a BucketProfile, not {job.logged_plan!r}")
        return job.logged_plan
    if job.scheduler.get("times"):
        return BucketProfile.read(str(job.scheduler.times))
    return None


def _mu(job: Job, plan: BucketProfile | None) -> float:
    """How many times longer a bucket takes on the second link (``plan``: ``_deft_plan``'s)."""
    if job.scheduler.get("mu"):
        return float(job.scheduler.mu)
    if "mu" in job.decisions:  # measured by the job itself
        return float(job.decisions["mu"])
    if plan is not None:
        return plan.mu
    if job.cluster.second_link_mu is not None:
        return job.cluster.second_link_mu
    second = job.cluster.second_link()
    if second is None:
        return PAPER_MU
    return job.cluster.bandwidth_bps / second.bandwidth_bps
