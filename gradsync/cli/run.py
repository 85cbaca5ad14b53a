"""``gradsync run [-m] [overrides...]``: compose every job once and check it before anything is
written, then hand the jobs to Hydra, which makes each job's run directory and calls
``run_job`` (``job.py``); the job's runner starts the worker processes.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from gradsync import families
from gradsync.cli.command import fail
from gradsync.cli.job import outcomes, run_job
from gradsync.cli.run_args import RunArgs, parse_run_args
from gradsync.config.files import CONFIG_MODULE, ROOT_CONFIG, output_dir_problem
from gradsync.jobs.compose import (
    ConfigError,
    check_submission,
    check_sweep,
    compose_jobs,
    defer_keys_of_swept_groups,
    launcher_overrides,
)
from gradsync.metrics.sweep_summary import SweepSummaryCallback, write_sweep_summary
from gradsync.stop_signals import Stopped


def main(args: list[str]) -> int:
    families.register()
    try:
        run = parse_run_args(args)
        if run is None:
            return 0  # the help was asked for
        args = _hydra_args(run)
    except ConfigError as exc:
        fail(str(exc))
    outcomes.command = shlex.join(["gradsync", "run", *args])
    multirun = "-m" in args
    if multirun:
        positions = [i for i, a in enumerate(args) if "=" in a and not a.startswith("-")]
        deferred = defer_keys_of_swept_groups([args[i] for i in positions])
        args = list(args)
        for i, text in zip(positions, deferred, strict=True):
            args[i] = text
    try:
        _run_in_hydra(args)
    except Stopped as stop:
        if outcomes.sweep_dir is not None:
            _summarize_stopped_sweep(stop, outcomes.sweep_dir)
        raise
    if multirun:
        # Jobs may have run elsewhere (Slurm): count what their summaries say.
        statuses = SweepSummaryCallback.statuses
        failed = sum(status != "completed" for status in statuses)
        if failed:
            fail(f"{failed} of {len(statuses)} jobs failed; see summary.csv", code=1)
        return 0
    return 1 if outcomes.failed else 0


@hydra.main(version_base="1.3", config_path=f"pkg://{CONFIG_MODULE}", config_name=ROOT_CONFIG)
def _hydra_main(cfg: DictConfig) -> None:
    run_job(cfg)


def _run_in_hydra(args: list[str]) -> None:
    """Run ``args`` as Hydra's own command line would.

    Only ``@hydra.main``'s path makes the run (or sweep) directories with their ``.hydra/``
    record, sets up job logging and callbacks, prints for --cfg/--info/--hydra-help, and starts
    a sweep's jobs through the launcher plugins (basic, submitit for Slurm); it reads its
    arguments from ``sys.argv`` alone, so they are put there for the call."""
    given = sys.argv
    sys.argv = ["gradsync", *args]
    try:
        _hydra_main()
    finally:
        sys.argv = given


def _hydra_args(run: RunArgs) -> list[str]:
    """The arguments Hydra parses, once every job has been composed and checked (ConfigError
    on a problem that concerns them all)."""
    given = [*(["-m"] if run.multirun else []), *run.hydra_flags, *run.overrides]
    if run.hydra_only:
        return given
    if run.prints_only:
        compose_jobs(run.overrides, multirun=False, launcher_here=False, machine=False)
        return given
    return _checked_args(run, given)


def _summarize_stopped_sweep(stop: Stopped, sweep_dir: Path) -> None:
    """summary.csv of a sweep cut short: the jobs that ran, the one stopped, the ones that
    never started (``missing``)."""
    path = write_sweep_summary(sweep_dir, expected_jobs=outcomes.jobs)
    completed = outcomes.finished - outcomes.failed
    print(
        f"gradsync: error: {stop.reason}; {completed} of {outcomes.jobs} jobs of the sweep "
        f"completed; see {path}",
        file=sys.stderr,
    )
    stop.reported = True


def _checked_args(run: RunArgs, args: list[str]) -> list[str]:
    """Compose and check every job before anything starts: its values, the output directory,
    the cluster's acceptance of the resources. A problem of single jobs of a sweep is a warning
    (they will be marked failed); ConfigError for one that concerns them all."""
    checked = check_sweep(run.overrides) if run.multirun else _as_sweep(run.overrides)
    valid = [cfg for cfg, problem in checked if problem is None]
    launcher = _submits_through_launcher(valid[0])
    problem = output_dir_problem(run.overrides, sweep=run.multirun or launcher)
    if problem is not None:
        raise ConfigError(problem)
    if launcher:
        # A cluster's queue takes jobs as a sweep (even one), shaped by all of them.
        args = ["-m", *[a for a in args if a != "-m"], *launcher_overrides(valid)]
        check_submission(valid)
    outcomes.jobs = len(checked)
    invalid = [problem for _, problem in checked if problem is not None]
    if invalid:
        print(
            f"gradsync: warning: {len(invalid)} of {len(checked)} jobs have invalid values "
            f"and will be marked failed without running (first: {invalid[0]})",
            file=sys.stderr,
        )
    return args


def _as_sweep(overrides: list[str]) -> list[tuple[DictConfig, ConfigError | None]]:
    """A single job, checked (ConfigError on a problem), in ``check_sweep``'s form."""
    return [(cfg, None) for cfg in compose_jobs(overrides, multirun=False)]


def _submits_through_launcher(cfg: DictConfig) -> bool:
    runner_schema = OmegaConf.get_type(cfg.runner)
    return bool(getattr(runner_schema, "submits_through_launcher", False))
