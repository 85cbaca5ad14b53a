"""Iteration time of one compressor × scheduler on one cluster, from the model's profile.

Each scheduler's own model lives in its package (``gradsync/schedulers/<family>/cost.py``) and is
named by its registry entry; this module holds what they share: the job they are asked about,
the estimate they return, bucket times for the discrete-event simulator
(``algorithms/simulator.py``), the OMGS paper's timeline of merged groups (eqs. 5–9,
``algorithms/merge_plans.py``) and the bytes a parameter server moves.

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

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig, OmegaConf

from gradsync.projection.cluster import Cluster
from gradsync.projection.profile import ModelProfile
from gradsync.projection.wire import Wire

if TYPE_CHECKING:
    from gradsync.algorithms.costs import CostModel
    from gradsync.algorithms.merge_plans import Layers, Plan
    from gradsync.algorithms.simulator import BucketTimes, Prediction
    from gradsync.schedulers.engine.buckets import Buckets
    from gradsync.schedulers.registry import SchedulerSpec

SIMULATED_ITERATIONS = 30


@dataclass(frozen=True)
class Job:
    profile: ModelProfile
    cluster: Cluster
    wire: Wire
    scheduler: DictConfig
    """The composed ``scheduler`` options."""
    decisions: Mapping[str, float] = field(default_factory=dict)
    """What the scheduler decides from measurements inside the job (its registry entry's
    ``decisions``), when known: OMGS's fitted γ, α, β (its plan follows them, its time the
    cluster's costs); DeFT's knapsack ``capacity_scale`` and ``mu``."""
    logged_plan: object | None = None
    """What the scheduler planned from inside the job, as its registry entry's ``plan_reader``
    reads it from the run's directory, when known (DeFT's buckets and the times it solved its
    knapsacks from): the schedule follows it, its time the cluster's costs."""
    cores_busy_share: float = 1.0
    """The share of the compute stream during which the host's cores are busy: below 1 when
    the stream is the slowest worker's (a trace-driven prediction) and the others finished
    earlier. Exchanges made after it are priced as on idle cores (``Cluster.idle``)."""
    between: float = 0.0
    """Seconds each iteration spends outside its passes, exchanges and update: loading its
    batch, combining what arrived, waiting for the slowest worker (set by ``predict``)."""


@dataclass(frozen=True)
class Estimate:
    iteration: float
    """Seconds per iteration in the steady state."""
    updates_per_iteration: float = 1.0
    simulated: Prediction | None = field(default=None, compare=False)
    """The simulator's prediction (with its timeline), for the bucketed schedules."""
    includes_between: bool = False
    """``iteration`` already holds ``Job.between``: a schedule whose links go on carrying
    sends while the workers load the next batch overlaps it; the others pay it after."""

    def samples_per_s(self, batch_size: int, workers: int) -> float:
        return batch_size * workers / self.iteration


# ---- bucketed schedules: the discrete-event simulator ------------------------------------------
def bucket_times(job: Job, buckets: Buckets) -> BucketTimes:
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


def simulated(
    job: Job, schedule: Callable[[BucketTimes], Prediction], times: BucketTimes
) -> Prediction:
    """``schedule`` on ``times``, computing slower while links are busy on a shared host."""
    from gradsync.algorithms.simulator import contended

    return contended(schedule, times, job.cluster.busy_link_slowdown)


def simulated_estimate(
    job: Job, schedule: Callable[[BucketTimes], Prediction], times: BucketTimes
) -> Estimate:
    """The estimate of a schedule that updates every iteration: ``simulated`` plus the update."""
    prediction = simulated(job, schedule, times)
    return Estimate(prediction.iteration + job.profile.update, simulated=prediction)


def partitioned(job: Job, elements: float) -> Buckets:
    from gradsync.schedulers.engine.buckets import Buckets

    return Buckets.partition(job.profile.sizes, max(1, int(elements)))


def start_up(job: Job) -> float:
    """One message's fixed cost: an exchange of nothing."""
    return job.wire.exchange_seconds(job.cluster, 0)


# ---- merged sparse groups: the OMGS timeline ---------------------------------------------------
PlanRule = Callable[["Layers", "CostModel"], "Plan"]


def merged_timeline(plan_of: PlanRule) -> Callable[[Job], Estimate]:
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
    a JSON file of gamma, alpha and beta as a run logs them), else the cluster's own."""
    fit = job.decisions if "alpha" in job.decisions else None
    if fit is None and job.scheduler.get("costs"):
        fit = json.loads(Path(str(job.scheduler.costs)).read_text())
    if fit is None:
        return cost
    return replace(
        cost,
        gamma=fit["gamma"],
        alpha=fit["alpha"],
        beta=fit["beta"],
        delta=fit.get("delta", 0.0),  # older runs and files fitted none
    )


def _log2(n: int) -> float:
    import math

    return math.log2(n) if n > 1 else 1.0


# ---- parameter servers: what one worker pushes and pulls -------------------------------------
def push_pull(job: Job, fraction: float = 1.0) -> tuple[float, float]:
    """(bytes one worker pushes, bytes it pulls) for ``fraction`` of the model."""
    p = job.profile
    return job.wire.bytes_sent(p.numel) * fraction, p.numel * p.element_bytes * fraction


def compute_and_compress(job: Job) -> float:
    p = job.profile
    return sum(p.forward) + sum(p.backward) + job.wire.compress_seconds


def _specs() -> Mapping[str, SchedulerSpec]:
    from gradsync.schedulers.registry import SCHEDULERS

    return SCHEDULERS


SCHEDULER_MODELS: Mapping[str, Callable[[Job], Estimate]] = {
    name: spec.estimate for name, spec in _specs().items()
}
"""Every scheduler's model, by option name (from the registry)."""
OVERLAPPED = frozenset(
    name for name, spec in _specs().items() if spec.capabilities.overlaps_backward
)
"""Schedulers that exchange while backward runs, from a communication thread (or the group's
own threads)."""


def predict(scheduler: str, job: Job) -> Estimate:
    """``scheduler``'s estimate for ``job``; options the job leaves out take their defaults."""
    from gradsync.schedulers.registry import spec_named

    try:
        spec = spec_named(scheduler)
    except ValueError:
        raise ValueError(
            f"no cost model for scheduler {scheduler!r}; valid: {', '.join(SCHEDULER_MODELS)}"
        ) from None
    able = spec.capabilities
    options = OmegaConf.merge(OmegaConf.structured(spec.config), job.scheduler)
    assert isinstance(options, DictConfig)
    job = replace(job, scheduler=options)
    if able.overlaps_backward:
        job = replace(job, cluster=job.cluster.overlapped())
    waits = job.cluster.sync_s if able.lockstep and job.cluster.workers > 1 else 0.0
    job = replace(job, between=job.profile.data + job.wire.combine_seconds + waits)
    estimate = spec.estimate(job)
    if estimate.includes_between:
        return estimate
    return replace(estimate, iteration=estimate.iteration + job.between)
