"""The cost model a scheduler that fits its own (``scheduler=omgs`` with no ``costs``) will plan
with on this host's shaped links, taken by running the job's planning steps for real.

Such a job fits α, β and γ to the exchanges and selections of its first ``profile_steps``
steps. On a shared host under ``runner=netem`` that fit is far from what the exchanges cost
once it plans: α takes in the cores' sharing while four workers compute, and with a shaper
whose bucket holds whole messages (``runner.burst=256kb``) β comes out near zero. (Measured
for ResNet-18 on 4 workers at 100 Mbit/s: α 27–30 ms and β 2–3e-7 s/B with the default
bucket, where the runs paid about 17 ms per exchange on idle cores; α 35 ms and β 0 with a
256 kB one.) The plan follows the fit, so a prediction of the job plans with the same fit and
prices the plan with the cluster's costs.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from gradsync.config.instantiate import build
from gradsync.families import runner_schema
from gradsync.jobs.compose import write_resolved
from gradsync.launch import WorkerFailure, worker_launch
from gradsync.measure import MeasurementError
from gradsync.schedulers.registry import SCHEDULERS, spec_named, spec_of


def logged_decisions(records: Iterable[Mapping[str, object]], scheduler: str) -> dict[str, float]:
    """The decisions ``scheduler`` logged in a run's metrics (its first record with all of
    them: its registry entry's ``decisions``, such as OMGS's fitted cost model or how far
    DeFT's preserver scaled its knapsacks); empty when it makes none or logged none."""
    spec = SCHEDULERS.get(scheduler)
    wanted = spec.capabilities.decisions if spec is not None else ()
    for record in records:
        if wanted and all(f"sched/{name}" in record for name in wanted):
            return {name: float(record[f"sched/{name}"]) for name in wanted}  # type: ignore[arg-type]
    return {}


def logged_plan(run_dir: Path, scheduler: str) -> object | None:
    """What ``scheduler`` planned from in the run at ``run_dir``, as its registry entry's
    ``plan_reader`` reads it (DeFT's buckets and the times it solved its schedule from); None
    for a scheduler that leaves no plan, or a run that never planned."""
    spec = SCHEDULERS.get(scheduler)
    return spec.logged_plan(run_dir) if spec is not None else None


def fits_here(scheduler: str, cfg: DictConfig) -> bool:
    """Whether the job plans with a fit it makes on this host's shaped links (its runner's
    schema ``shapes_links``): one from the all-gathers it times (all-reduced payloads are not
    timed one by one; such a job microbenchmarks the link, past any burst)."""

    return (
        scheduler in SCHEDULERS
        and SCHEDULERS[scheduler].capabilities.fits_in_place
        and not OmegaConf.select(cfg, "scheduler.costs")
        and runner_schema(cfg).shapes_links
        and not build(cfg.compressor, path="compressor").allreducible
    )


def planning_fit(cfg: DictConfig, scheduler: str | None = None) -> dict[str, float]:
    """The decisions (its registry entry's: γ, α, β) the job fits in its first steps: the job
    itself, run in a scratch directory (no checkpoints) until it logs them. ``scheduler``: the
    job's option, for a config read back from a run (plain); by default its composed
    ``scheduler`` node's."""

    spec = spec_named(scheduler) if scheduler is not None else spec_of(cfg.scheduler)

    job = cfg.copy()
    # Logging as the job does (its metric reductions are collectives the workers meet at,
    # which shape the timings fitted), up to the first log after the plan is made (after a
    # warm-up step and the profiled steps).
    every = int(cfg.trainer.log_every)
    job.trainer.max_steps = ((int(cfg.scheduler.profile_steps) + 1) // every + 1) * every
    job.trainer.checkpoint = False
    job.trainer.resume = None
    job.logger.wandb = None
    job.logger.progress = False
    with tempfile.TemporaryDirectory() as scratch:
        run_dir = Path(scratch)
        config = run_dir / "config.yaml"
        write_resolved(job, config)
        runner = build(job.runner, path="runner")
        try:
            runner.run(worker_launch(config, run_dir, threads=int(job.trainer.threads_per_worker)))
        except WorkerFailure as exc:
            raise MeasurementError(f"the job's planning steps failed: {exc}") from None
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    fit = logged_decisions((json.loads(line) for line in lines), spec.name)
    if not fit:
        wanted = ", ".join(spec.capabilities.decisions) or "decisions"
        raise MeasurementError(f"the job's planning steps logged no fitted {wanted}")
    return fit
