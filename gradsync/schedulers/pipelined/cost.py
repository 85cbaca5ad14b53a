"""The pipelined schedulers for ``gradsync simulate``.

* ``wfbp``: the discrete-event simulator on DDP's buckets, as the scheduler forms them.
* ``lags``, ``mgs``, ``omgs``: the OMGS paper's timeline (eqs. 5–9) of the plan each rule makes,
  with γ from the compressor's measured selection time and α, β of an all-gather on the
  cluster; on a shared host, an exchange that starts once the workers have stopped computing
  pays the start-ups of calls on idle cores (``Cluster.idle``)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from gradsync.algorithms import simulator
from gradsync.algorithms.merge_plans import OMGS_RULES, no_merge, threshold_groups
from gradsync.projection.estimates import Estimate, Job
from gradsync.projection.predict import (
    SIMULATED_ITERATIONS,
    PlanRule,
    merged_timeline,
    simulated_estimate,
)
from gradsync.schedulers.bucket_costs import bucket_times
from gradsync.schedulers.engine.buckets import Buckets
from gradsync.schedulers.pipelined.wfbp import BucketPlanner

if TYPE_CHECKING:
    from gradsync.algorithms.costs import CostModel
    from gradsync.algorithms.merge_plans import Layers, Plan


def wfbp(job: Job) -> Estimate:

    # DDP's buckets, as the scheduler forms them: whole tensors, the first one small.
    planner = BucketPlanner(float(job.scheduler.bucket_mb), float(job.scheduler.first_bucket_mb))
    sizes = job.profile.sizes
    plan = planner.groups(sizes, job.profile.element_bytes)
    times = bucket_times(job, Buckets.of_groups(sizes, plan))
    schedule = functools.partial(simulator.wfbp, iterations=SIMULATED_ITERATIONS)
    return simulated_estimate(job, schedule, times)


def _no_merge(layers: Layers, cost: CostModel) -> Plan:

    return no_merge(layers, cost)


def _omgs_rule(job_rule: str) -> PlanRule:

    return OMGS_RULES[job_rule]


def omgs(job: Job) -> Estimate:
    return merged_timeline(_omgs_rule(str(job.scheduler.rule)))(job)


def mgs(job: Job) -> Estimate:

    threshold = int(job.scheduler.threshold)
    return merged_timeline(lambda layers, _: threshold_groups(layers.sizes, threshold))(job)


lags = merged_timeline(_no_merge)
