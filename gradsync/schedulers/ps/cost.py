"""The parameter-server schedulers for ``gradsync simulate``.

* ``ps_bsp``: compute, then every worker pushes its (compressed) gradient and pulls dense
  parameters through the servers' links (incast, pushes and pulls in turn:
  ``Cluster.push_pull``).
* ``asp``, ``ssp``: no barrier, so an iteration takes the longer of one worker's own compute +
  push + pull and the servers' links carrying everyone's traffic once.
* ``osp``: ps_bsp for the important layers; the unimportant ones travel behind the next
  iteration's compute (ICS). They are the smallest layers that fit in U_max (OSP moves whole
  layers; the loss factor of its schedule is taken at its best, 1), or, given a run's
  decisions, the share of the model its GIBs sent in the background on average.
"""

from __future__ import annotations

from gradsync.algorithms.osp_budget import umax_bytes
from gradsync.cluster.rates import rate_mbit
from gradsync.projection.estimates import Estimate, Job, ModelProfile
from gradsync.projection.predict import compute_and_compress, push_pull


def bulk_synchronous(job: Job) -> Estimate:
    return Estimate(
        compute_and_compress(job) + job.cluster.push_pull(*push_pull(job)) + job.profile.update
    )


def asynchronous(job: Job) -> Estimate:
    own = compute_and_compress(job) + job.cluster.own_push_pull(*push_pull(job))
    return Estimate(max(own, job.cluster.servers_busy(*push_pull(job))) + job.profile.update)


def overlapped_synchronous(job: Job) -> Estimate:

    p, cluster = job.profile, job.cluster
    given = job.scheduler.get("bandwidth")  # a tc rate, as OSP's server reads it for U_max
    bandwidth = rate_mbit(str(given)) * 1e6 / 8 if given else cluster.bandwidth_bps / 8
    compute = sum(p.forward) + sum(p.backward)
    budget = job.scheduler.get("budget")
    cap = float(job.scheduler.max_unimportant)
    model_bytes = p.numel * p.element_bytes
    if "unimportant_fraction" in job.decisions:
        # What a run's GIBs moved, on average: its budget grows with the epochs from 0.
        fraction = float(job.decisions["unimportant_fraction"])
    else:
        if budget is not None:
            allowed = float(budget) * model_bytes
        else:
            allowed = umax_bytes(bandwidth, compute, cluster.workers, model_bytes, cap=cap)
        fraction = _smallest_layers_within(p, allowed) / model_bytes
    important = cluster.push_pull(*push_pull(job, 1 - fraction))
    background = cluster.servers_busy(*push_pull(job, fraction))
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
