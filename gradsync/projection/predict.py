"""What the schedulers' cost models share, for the iteration time of one compressor ×
scheduler on one cluster from the model's profile.

Each scheduler's own model lives in its package (``gradsync/schedulers/<family>/cost.py``) and is
named by its registry entry (``schedulers/costs.py`` asks it); the job it is asked about and the
estimate it returns are ``estimates.py``'s. This module holds the simulator's runs of a
schedule (``algorithms/simulator.py``; the bucketed schedules' times are
``schedulers/bucket_costs.py``'s), the OMGS paper's timeline of merged groups (eqs. 5–9,
``algorithms/merge_plans.py``) and the bytes a parameter server moves.

On a shared host, the overlapped schedulers' calls cost what calls made from a communication
thread while computing do (``Cluster.overlapped``), the others' what calls right after
computing do. Every iteration also pays the optimizer update once (on the server for the
parameter servers), combining what the workers sent into one gradient (once, after the last
exchange, as the schedulers do), and loading its batch; on a shared host, schedulers whose
workers meet every iteration also wait for the slowest worker's share of the cores
(``Cluster.sync_s``), and compute is slowed by the workers' sharing of the cores
(``Cluster.compute_slowdown``, applied by ``measure/jobs.py``'s ``Predictor``); in the
bucketed schedules it is slowed further while a link is busy (``Cluster.busy_link_slowdown``:
the cores also move the bytes).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from gradsync.algorithms.costs import CostModel
from gradsync.algorithms.merge_plans import Layers, iteration_seconds
from gradsync.algorithms.simulator import contended
from gradsync.projection.estimates import Estimate, Job, Wire

if TYPE_CHECKING:
    from gradsync.algorithms.merge_plans import Plan
    from gradsync.algorithms.simulator import BucketTimes, Prediction

SIMULATED_ITERATIONS = 30


# ---- bucketed schedules: the discrete-event simulator ------------------------------------------
def simulated(
    job: Job, schedule: Callable[[BucketTimes], Prediction], times: BucketTimes
) -> Prediction:
    """``schedule`` on ``times``, computing slower while links are busy on a shared host."""

    return contended(schedule, times, job.cluster.busy_link_slowdown)


def simulated_estimate(
    job: Job, schedule: Callable[[BucketTimes], Prediction], times: BucketTimes
) -> Estimate:
    """The estimate of a schedule that updates every iteration: ``simulated`` plus the update."""
    prediction = simulated(job, schedule, times)
    return Estimate(
        prediction.iteration + job.profile.update, simulated=prediction, groups=len(times.comm)
    )


def start_up(job: Job) -> float:
    """One message's fixed cost: an exchange of nothing."""
    return job.wire.exchange_seconds(job.cluster, 0)


# ---- merged sparse groups: the OMGS timeline ---------------------------------------------------
PlanRule = Callable[["Layers", "CostModel"], "Plan"]


def merged_timeline(plan_of: PlanRule) -> Callable[[Job], Estimate]:
    def model(job: Job) -> Estimate:

        p, wire, cluster = job.profile, job.wire, job.cluster
        # OMGS's cost model in this job's terms: α the start-ups of one exchange, β per byte
        # of it, γ from the compressor's measured time (TKPM's ρ·d·log2 d) or the cluster's
        # selection cost.
        alpha = wire.transfer_seconds(cluster, 0)
        beta = (wire.transfer_seconds(cluster, p.numel) - alpha) / max(wire.bytes_sent(p.numel), 1)
        cost = CostModel(
            alpha=alpha,
            beta=beta,
            density=wire.density,
            bytes_per_element=wire.bytes_sent(1) / wire.density,
            **_selection_terms(wire, p.numel),
        )
        layers = Layers(backward=p.backward, sizes=p.sizes)
        plan = plan_of(layers, _planned_with(job, cost))
        after_compute = replace(cost, alpha=wire.transfer_seconds(cluster.idle(), 0))
        seconds = iteration_seconds(
            plan, layers, cost, sum(p.forward), after_compute, job.cores_busy_share
        )
        seconds += p.update
        return Estimate(seconds, groups=len(plan))

    return model


def _selection_terms(wire: Wire, numel: int) -> dict[str, float]:
    """TKPM's γ, and a cost per element, of the wire's selection: the cluster's (γ·ρ is its
    ``d_log2_d``), else γ fitted to the time measured for the whole gradient."""
    if wire.selection is not None:
        return {
            "gamma": wire.selection.d_log2_d / wire.density,
            "per_element": wire.selection.per_element,
        }
    return {"gamma": wire.compress_seconds / (wire.density * numel * _log2(numel))}


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
