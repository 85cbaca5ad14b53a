"""A scheduler's iteration time for a job, from its registry entry's cost model: the options
the job leaves out take their defaults, an overlapped schedule's calls cost what calls from a
communication thread do, and every iteration pays what it spends outside its passes and
exchanges (``Job.between``). Torch-free (the cost models import what they need on use)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from omegaconf import DictConfig, OmegaConf

from gradsync.projection.estimates import Estimate, Job
from gradsync.schedulers.registry import SCHEDULERS, spec_named

SCHEDULER_MODELS: Mapping[str, Callable[[Job], Estimate]] = {
    name: spec.estimate for name, spec in SCHEDULERS.items()
}
"""Every scheduler's model, by option name (from the registry)."""
OVERLAPPED = frozenset(
    name for name, spec in SCHEDULERS.items() if spec.capabilities.overlaps_backward
)
"""Schedulers that exchange while backward runs, from a communication thread (or the group's
own threads)."""


def predict(scheduler: str, job: Job) -> Estimate:
    """``scheduler``'s estimate for ``job``; options the job leaves out take their defaults."""
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
