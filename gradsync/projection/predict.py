"""Iteration time of one compressor × scheduler on one cluster, from the model's profile.

Each scheduler has one model here, chosen by name (the same names as ``scheduler=``):

* ``allreduce``: backward, then compress and exchange the whole gradient (no overlap).
* ``wfbp``, ``bytescheduler``, ``usbyte``, ``deft``: the discrete-event simulator
  (``sync/simulator.py``) on buckets of the scheduler's own size, each bucket's communication
  priced by the compressor's measured wire format on the cluster.
* ``lags``, ``mgs``, ``omgs``: the OMGS paper's timeline (eqs. 5–9, ``sync/merge_plans.py``) of
  the plan each rule makes, with γ from the compressor's measured selection time and α, β of an
  all-gather on the cluster; on a shared host, an exchange that starts once the workers have
  stopped computing pays the start-ups of calls on idle cores (``Cluster.idle``).
* ``ps_bsp``: compute, then every worker pushes its (compressed) gradient and pulls dense
  parameters through the servers' links (incast, pushes and pulls in turn:
  ``Cluster.push_pull``).
* ``asp``, ``ssp``: no barrier, so an iteration takes the longer of one worker's own compute +
  push + pull and the servers' links carrying everyone's traffic once.
* ``osp``: ps_bsp for the important layers; the unimportant ones travel behind the next
  iteration's compute (ICS). They are the smallest layers that fit in U_max (OSP moves whole
  layers; the loss factor of its schedule is taken at its best, 1).

On a shared host, the overlapped schedulers' calls cost what calls made from a communication
thread while computing do (``Cluster.overlapped``), the others' what calls right after
computing do. Every iteration also pays the optimizer update once (on the server for the
parameter servers), combining what the workers sent into one gradient (once, after the last
exchange, as the schedulers do), and loading its batch; on a shared host, schedulers whose
workers meet every iteration also wait for the slowest worker's share of the cores
(``Cluster.sync_s``), and compute is slowed by the workers' sharing of the cores
(``Cluster.compute_slowdown``, applied by ``jobs.Predictor``); in the bucketed schedules it
is slowed further while a link is busy (``Cluster.busy_link_slowdown``: the cores also move
the bytes).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig

from gradsync.projection.cluster import Cluster
from gradsync.projection.profile import ModelProfile
from gradsync.projection.wire import Wire

if TYPE_CHECKING:
    from gradsync.algorithms.costs import CostModel
    from gradsync.algorithms.merge_plans import Layers, Plan
    from gradsync.algorithms.simulator import BucketTimes, Prediction
    from gradsync.schedulers.deft.deft import BucketProfile
    from gradsync.schedulers.engine.buckets import Buckets

SIMULATED_ITERATIONS = 30
MAX_DEFT_BUCKETS = 256  # splitting further only slows the knapsacks down
DEFAULT_MU = 1.65  # the DeFT paper's slow-link factor, when the cluster has no second link


@dataclass(frozen=True)
class Job:
    profile: ModelProfile
    cluster: Cluster
    wire: Wire
    scheduler: DictConfig
    """The composed ``scheduler`` options."""
    decisions: Mapping[str, float] = field(default_factory=dict)
    """What the scheduler decides from measurements inside the job (``planning.DECISIONS``),
    when known: OMGS's fitted γ, α, β (its plan follows them, its time the cluster's costs);
    DeFT's knapsack ``capacity_scale`` and ``mu``."""
    bucket_plan: BucketProfile | None = None
    """DeFT's buckets and the times it solved its knapsacks from, measured inside the job (its
    run's ``deft_profile.json``), when known: the schedule follows them, its time the
    cluster's costs. ``scheduler.times`` gives them too."""
    cores_busy_share: float = 1.0
    """The share of the compute stream during which the host's cores are busy: below 1 when
    the stream is the slowest worker's (a trace-driven prediction) and the others finished
    earlier. Exchanges made after it are priced as on idle cores (``Cluster.idle``)."""


@dataclass(frozen=True)
class Estimate:
    iteration: float
    """Seconds per iteration in the steady state."""
    updates_per_iteration: float = 1.0
    simulated: Prediction | None = field(default=None, compare=False)
    """The simulator's prediction (with its timeline), for the bucketed schedules."""

    def samples_per_s(self, batch_size: int, workers: int) -> float:
        return batch_size * workers / self.iteration


# ---- bucketed schedules: the discrete-event simulator ------------------------------------------
def _bucket_times(job: Job, buckets: Buckets) -> BucketTimes:
    from gradsync.algorithms.simulator import BucketTimes

    p = job.profile
    comm = [
        job.wire.exchange_seconds(job.cluster, buckets.numel(b)) if job.cluster.workers > 1 else 0
        for b in range(len(buckets))
    ]
    return BucketTimes(
        forward=tuple(buckets.spread(p.forward, p.sizes)),
        backward=tuple(buckets.spread(p.backward, p.sizes)),
        comm=tuple(comm),
    )


def _simulated(
    job: Job, schedule: Callable[[BucketTimes], Prediction], times: BucketTimes
) -> Prediction:
    """``schedule`` on ``times``, computing slower while links are busy on a shared host."""
    from gradsync.algorithms.simulator import contended

    return contended(schedule, times, job.cluster.busy_link_slowdown)


def _buckets(job: Job, elements: float) -> Buckets:
    from gradsync.schedulers.engine.buckets import Buckets

    return Buckets.partition(job.profile.sizes, max(1, int(elements)))


def _start_up(job: Job) -> float:
    """One message's fixed cost: an exchange of nothing."""
    return job.wire.exchange_seconds(job.cluster, 0)


def _allreduce(job: Job) -> Estimate:
    p = job.profile
    comm = job.wire.exchange_seconds(job.cluster, p.numel) if job.cluster.workers > 1 else 0.0
    return Estimate(p.compute + comm)


def _wfbp(job: Job) -> Estimate:
    from gradsync.algorithms.simulator import wfbp
    from gradsync.schedulers.engine.buckets import Buckets
    from gradsync.schedulers.pipelined.wfbp import BucketPlanner

    # DDP's buckets, as the scheduler forms them: whole tensors, the first one small.
    planner = BucketPlanner(
        float(job.scheduler.get("bucket_mb", 25.0)),
        float(job.scheduler.get("first_bucket_mb", 1.0)),
    )
    sizes = job.profile.sizes
    plan = planner.groups(sizes, job.profile.element_bytes)
    times = _bucket_times(job, Buckets.of_groups(sizes, plan))
    prediction = _simulated(job, functools.partial(wfbp, iterations=SIMULATED_ITERATIONS), times)
    return Estimate(prediction.iteration + job.profile.update, simulated=prediction)


def _bytescheduler(job: Job) -> Estimate:
    from gradsync.algorithms.simulator import bytescheduler

    times = _bucket_times(job, _buckets(job, int(job.scheduler.partition_size)))
    schedule = functools.partial(
        bytescheduler, partitions=1, iterations=SIMULATED_ITERATIONS, alpha=_start_up(job)
    )
    prediction = _simulated(job, schedule, times)
    return Estimate(prediction.iteration + job.profile.update, simulated=prediction)


def _usbyte(job: Job) -> Estimate:
    from gradsync.algorithms.simulator import usbyte
    from gradsync.schedulers.engine.buckets import PARTITION_SIZE

    times = _bucket_times(job, _buckets(job, PARTITION_SIZE))
    schedule = functools.partial(usbyte, iterations=SIMULATED_ITERATIONS, alpha=_start_up(job))
    prediction = _simulated(job, schedule, times)
    return Estimate(prediction.iteration + job.profile.update, simulated=prediction)


def _deft(job: Job) -> Estimate:
    from gradsync.algorithms.simulator import BucketTimes, deft
    from gradsync.schedulers.engine.buckets import Buckets

    two_links = int(job.scheduler.get("links", 1)) == 2
    plan = _deft_plan(job)
    mu = _mu(job, plan) if two_links else None
    if plan is not None:  # the job's own buckets, and the times it solved its knapsacks from
        times = _bucket_times(job, Buckets(plan.bounds))
        planned: BucketTimes | None = BucketTimes(plan.forward, plan.backward, plan.comm)
    else:
        times, planned = _deft_buckets(job, mu), None
    # The preserver's retries scale the knapsacks (fewer delayed buckets, more updates).
    scale = float(job.decisions.get("capacity_scale", 1.0))
    schedule = functools.partial(
        deft, iterations=SIMULATED_ITERATIONS, mu=mu, capacity_scale=scale, planned=planned
    )
    prediction = _simulated(job, schedule, times)
    return Estimate(
        prediction.iteration + job.profile.update, prediction.update_frequency, prediction
    )


def _deft_buckets(job: Job, mu: float | None) -> BucketTimes:
    """DeFT's buckets as it would make them on the cluster: partitioned, then (its step 3)
    those too long for the smallest knapsack, the forward window (on the slow link when there
    are two), split."""
    buckets = _buckets(job, int(job.scheduler.get("partition_size") or 6_500_000))
    times = _bucket_times(job, buckets)
    window = sum(times.forward) / max(mu or 1.0, 1.0)
    alpha = _start_up(job)
    if window > alpha:
        room = max(window - alpha, sum(times.comm) / MAX_DEFT_BUCKETS)
        times = _bucket_times(job, buckets.refine([c - alpha for c in times.comm], room))
    return times


def _deft_plan(job: Job) -> BucketProfile | None:
    """The buckets and times DeFT solves from: the job's own when known, else those given as
    ``scheduler.times``, else none (it measures them on the cluster)."""
    from gradsync.schedulers.deft.deft import BucketProfile

    if job.bucket_plan is not None:
        return job.bucket_plan
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
        return DEFAULT_MU
    return job.cluster.bandwidth_bps / second.bandwidth_bps


# ---- merged sparse groups: the OMGS timeline ---------------------------------------------------
PlanRule = Callable[["Layers", "CostModel"], "Plan"]


def _merged(plan_of: PlanRule) -> Callable[[Job], Estimate]:
    def model(job: Job) -> Estimate:
        from gradsync.algorithms.costs import CostModel
        from gradsync.algorithms.merge_plans import Layers, iteration_seconds

        p, wire, cluster = job.profile, job.wire, job.cluster
        # OMGS's cost model in this job's terms: α the start-ups of one exchange, β per byte
        # of it, γ from the compressor's measured time (TKPM's ρ·d·log2 d).
        alpha = wire.transfer_seconds(cluster, 0)
        beta = (wire.transfer_seconds(cluster, p.numel) - alpha) / max(wire.bytes_sent(p.numel), 1)
        gamma = wire.compress_seconds / (wire.density * p.numel * _log2(p.numel))
        cost = CostModel(
            gamma=gamma,
            alpha=alpha,
            beta=beta,
            density=wire.density,
            bytes_per_element=wire.bytes_sent(1) / wire.density,
        )
        layers = Layers(backward=p.backward, sizes=p.sizes)
        plan = plan_of(layers, _planned_with(job, cost))
        after_compute = replace(cost, alpha=wire.transfer_seconds(cluster.idle(), 0))
        seconds = iteration_seconds(
            plan, layers, cost, sum(p.forward), after_compute, job.cores_busy_share
        )
        seconds += p.update
        return Estimate(seconds)

    return model


def _planned_with(job: Job, cost: CostModel) -> CostModel:
    """The cost model the job's planner sees: the fit it makes or was given (``scheduler.costs``,
    as ``gradsync plan`` writes), else the cluster's own."""
    fit = job.decisions if "alpha" in job.decisions else None
    if fit is None and job.scheduler.get("costs"):
        fit = json.loads(Path(str(job.scheduler.costs)).read_text())
    if fit is None:
        return cost
    return replace(cost, gamma=fit["gamma"], alpha=fit["alpha"], beta=fit["beta"])


def _log2(n: int) -> float:
    import math

    return math.log2(n) if n > 1 else 1.0


def _lags(layers: Layers, cost: CostModel) -> Plan:
    from gradsync.algorithms.merge_plans import no_merge

    return no_merge(layers, cost)


def _omgs_rule(job_rule: str) -> PlanRule:
    from gradsync.algorithms.merge_plans import OMGS_RULES

    return OMGS_RULES[job_rule]


def _omgs(job: Job) -> Estimate:
    return _merged(_omgs_rule(str(job.scheduler.get("rule", "paper"))))(job)


def _mgs(job: Job) -> Estimate:
    from gradsync.algorithms.merge_plans import threshold_groups

    threshold = int(job.scheduler.get("threshold", 8192))
    return _merged(lambda layers, _: threshold_groups(layers.sizes, threshold))(job)


# ---- parameter servers -------------------------------------------------------------------------
def _push_pull(job: Job, fraction: float = 1.0) -> tuple[float, float]:
    """(bytes one worker pushes, bytes it pulls) for ``fraction`` of the model."""
    p = job.profile
    return job.wire.bytes_sent(p.numel) * fraction, p.numel * p.element_bytes * fraction


def _compute_and_compress(job: Job) -> float:
    p = job.profile
    return sum(p.forward) + sum(p.backward) + job.wire.compress_seconds


def _ps_bsp(job: Job) -> Estimate:
    return Estimate(
        _compute_and_compress(job) + job.cluster.push_pull(*_push_pull(job)) + job.profile.update
    )


def _asynchronous(job: Job) -> Estimate:
    own = _compute_and_compress(job) + job.cluster.own_push_pull(*_push_pull(job))
    return Estimate(max(own, job.cluster.servers_busy(*_push_pull(job))) + job.profile.update)


def _osp(job: Job) -> Estimate:
    from gradsync.algorithms.osp_split import umax_bytes

    p, cluster = job.profile, job.cluster
    bandwidth = float(job.scheduler.get("bandwidth") or 0) or cluster.bandwidth_bps / 8
    compute = sum(p.forward) + sum(p.backward)
    budget = job.scheduler.get("budget")
    cap = float(job.scheduler.get("max_unimportant", 0.8))
    model_bytes = p.numel * p.element_bytes
    if budget is not None:
        allowed = float(budget) * model_bytes
    else:
        allowed = umax_bytes(bandwidth, compute, cluster.workers, model_bytes, cap=cap)
    fraction = _smallest_layers_within(p, allowed) / model_bytes
    important = cluster.push_pull(*_push_pull(job, 1 - fraction))
    background = cluster.servers_busy(*_push_pull(job, fraction))
    return Estimate(max(compute + important, background) + p.update)


def _smallest_layers_within(profile: ModelProfile, allowed: float) -> float:
    """Bytes of the smallest whole layers whose total stays within ``allowed``."""
    total = 0.0
    for size in sorted(profile.sizes):
        nbytes = size * profile.element_bytes
        if total + nbytes > allowed:
            break
        total += nbytes
    return total


SCHEDULER_MODELS: dict[str, Callable[[Job], Estimate]] = {
    "allreduce": _allreduce,
    "wfbp": _wfbp,
    "bytescheduler": _bytescheduler,
    "usbyte": _usbyte,
    "deft": _deft,
    "lags": _merged(_lags),
    "mgs": _mgs,
    "omgs": _omgs,
    "ps_bsp": _ps_bsp,
    "asp": _asynchronous,
    "ssp": _asynchronous,
    "osp": _osp,
}


# Workers of these meet every iteration, so each waits for the slowest's share of a shared host.
IN_LOCKSTEP = frozenset(SCHEDULER_MODELS) - {"asp", "ssp"}
# These exchange while backward runs, from a communication thread (or the group's own threads).
OVERLAPPED = frozenset({"wfbp", "bytescheduler", "usbyte", "deft", "lags", "mgs", "omgs"})


def predict(scheduler: str, job: Job) -> Estimate:
    try:
        model = SCHEDULER_MODELS[scheduler]
    except KeyError:
        raise ValueError(
            f"no cost model for scheduler {scheduler!r}; valid: {', '.join(SCHEDULER_MODELS)}"
        ) from None
    if scheduler in OVERLAPPED:
        job = replace(job, cluster=job.cluster.overlapped())
    estimate = model(job)
    waits = job.cluster.sync_s if scheduler in IN_LOCKSTEP and job.cluster.workers > 1 else 0.0
    once = job.profile.data + job.wire.combine_seconds + waits
    return replace(estimate, iteration=estimate.iteration + once)
