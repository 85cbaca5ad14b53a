"""``gradsync``: the command line.

``gradsync run [-m] [overrides...]`` composes the config once (Hydra), checks every job before
anything is written, then hands each job to its runner, which starts the worker processes.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
import time
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from gradsync import __version__
from gradsync.cli.run_args import RunArgs, parse_run_args
from gradsync.config.compose import (
    ConfigError,
    check_config,
    check_submission,
    check_sweep,
    compose_jobs,
    defer_keys_of_swept_groups,
    launcher_overrides,
    write_resolved,
)
from gradsync.config.files import CONFIG_MODULE, ROOT_CONFIG, ROOT_CONFIG_FILE, output_dir_problem
from gradsync.config.instantiate import build
from gradsync.config.schema import register_schemas
from gradsync.metrics.summary import write_summary
from gradsync.metrics.sweep_summary import SweepSummaryCallback, write_sweep_summary
from gradsync.stop_signals import Stopped, stop_on_signals
from gradsync.train.checkpoint import resolve_checkpoint
from runners.base import Runner, WorkerFailure, worker_launch

log = logging.getLogger("gradsync")

_EVAL_SHOWN = (
    ("eval/accuracy", "accuracy"),
    ("eval/accuracy_top5", "top-5"),
    ("eval/perplexity", "perplexity"),
    ("eval/hr@10", "HR@10"),
)
COMMANDS = {
    "run": "train one configuration, or a sweep of them with -m",
    "sweep": "a sweep as text for a scheduler: --list OVERRIDES, --summarize SWEEP_DIR",
    "report": "tables and plots comparing run and sweep directories: report PATH...",
    "plan": "OMGS merge plans and modelled iteration times, without training: plan OVERRIDES",
    "simulate": "every compressor x scheduler predicted, and projected: simulate OVERRIDES",
}


class _Invocation:
    """This command and what happened to its jobs (Hydra runs them in this process)."""

    def __init__(self) -> None:
        self.command = "gradsync"
        self.finished = 0
        self.failed = 0
        self.jobs = 1
        self.sweep_dir: Path | None = None
        """Where a sweep's jobs go (set once its first job starts)."""


_outcomes = _Invocation()


# ---- one job (called by Hydra for each job, in this process) --------------------------------
def run_job(cfg: DictConfig) -> None:
    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    if hydra_cfg.mode == RunMode.MULTIRUN:
        _outcomes.sweep_dir = Path(hydra_cfg.sweep.dir)
    overrides = list(hydra_cfg.overrides.task)
    config_path = run_dir / "config.yaml"
    write_resolved(cfg, config_path)
    started = time.time()
    stopped: Stopped | None = None
    runner: Runner | None = None
    try:
        check_config(cfg)  # in a sweep, a job with a bad value fails on its own
        runner = build(cfg.runner, path="runner")
        if runner.restarted and cfg.trainer.resume is None and _has_checkpoint(run_dir):
            cfg.trainer.resume = str(run_dir)  # requeued by the scheduler: continue, not restart
            write_resolved(cfg, config_path)
            log.info(f"restarted by the scheduler: resuming from {run_dir}")
        status, error = _launch(runner, cfg, run_dir, config_path)
    except ConfigError as exc:
        status, error = "failed", str(exc)
    except Stopped as stop:  # workers stopped (or never started); say so in the summary
        if runner is not None and not runner.reports_outcome:
            raise  # task 0 of this job (under srun or torchrun) writes the summary
        stopped, status, error = stop, stop.status, stop.reason
    else:
        if not runner.reports_outcome:
            return  # task 0 of this job (under srun or torchrun) writes the summary
    summary = write_summary(
        run_dir,
        status=status,
        command=_outcomes.command,
        overrides=overrides,
        config_path=config_path,
        started=started,
        ended=time.time(),
        error=error,
    )
    _outcomes.finished += 1
    if status == "completed":
        log.info(_summary_line(summary))
        return
    _outcomes.failed += 1
    in_sweep = _outcomes.sweep_dir is not None
    if stopped is None or not in_sweep:  # a stopped sweep says it once, for all its jobs
        log.error(f"gradsync: error: {error} (run dir: {run_dir})")
    if stopped is not None:
        stopped.reported = not in_sweep
        raise stopped  # no further job of a sweep starts


def _has_checkpoint(run_dir: Path) -> bool:
    try:
        resolve_checkpoint(run_dir)
    except ValueError:
        return False  # restarted before its first checkpoint: it starts over
    return True


def _launch(
    runner: Runner, cfg: DictConfig, run_dir: Path, config_path: Path
) -> tuple[str, str | None]:
    """Run the job's workers; (status, error)."""
    launch = worker_launch(config_path, run_dir, threads=int(cfg.trainer.threads_per_worker))
    log.info(f"run dir: {run_dir}")
    try:
        runner.run(launch)
    except WorkerFailure as exc:
        return "failed", str(exc)
    return "completed", None


def _summary_line(summary: dict) -> str:
    final = summary["final"]
    parts = [f"done in {summary['wall_time_s']:.1f} s"]
    for key, label in _EVAL_SHOWN:
        if key in final:
            parts.append(f"{label} {final[key]:.4f}")
    if "perf/samples_per_s_mean" in final:
        parts.append(f"{final['perf/samples_per_s_mean']:.0f} samples/s")
    if "comm/bytes_sent" in final:
        sent = f"{final['comm/bytes_sent'] / 1e3:.1f} kB sent/step/worker"
        if final.get("comm/compression_ratio", 1.0) != 1.0:
            sent += f" ({final['comm/compression_ratio']:.3g}x smaller than dense)"
        parts.append(sent)
    if "comm/density_actual" in final:
        parts.append(f"density {final['comm/density_actual']:.4g}")
    if "comm/error_norm" in final:
        parts.append(f"error norm {final['comm/error_norm']:.4g}")
    return " | ".join(parts) + f"\nrun dir: {summary['run_dir']}"


@hydra.main(version_base="1.3", config_path=f"pkg://{CONFIG_MODULE}", config_name=ROOT_CONFIG)
def _hydra_main(cfg: DictConfig) -> None:
    run_job(cfg)


# ---- the command line --------------------------------------------------------------------
def _fail(message: str, code: int = 2) -> None:
    print(f"gradsync: error: {message}", file=sys.stderr)
    raise SystemExit(code)


def _groups_text() -> str:
    from gradsync.config.discovery import group_options

    lines = ["config groups (group=option; * marks the default):"]
    defaults = OmegaConf.load(ROOT_CONFIG_FILE).defaults
    chosen = {k: v for d in defaults if isinstance(d, DictConfig | dict) for k, v in d.items()}
    for group, options in group_options().items():
        shown = [f"{o}*" if chosen.get(group) == o else o for o in options]
        lines.append(f"  {group:<11} {', '.join(shown) if shown else '(none yet)'}")
    return "\n".join(lines)


def _print_help() -> None:
    print(f"gradsync {__version__}: communication-efficient data-parallel training experiments\n")
    print("usage: gradsync COMMAND [args]\n\ncommands:")
    for name, text in COMMANDS.items():
        print(f"  {name:<11} {text}")
    print()
    print(_groups_text())
    print("\nexamples:")
    print("  gradsync run")
    print("  gradsync run model=mlp trainer.workers=4 trainer.max_steps=50")
    print("  gradsync run -m trainer.workers=1,2 trainer.lr=0.1,0.05")
    print("\nmore: gradsync run --help, gradsync run --cfg job (show the composed config)")


def _print_run_help() -> None:
    print("usage: gradsync run [-m] [group=option ...] [key=value ...]\n")
    print("Train one configuration; with -m, every combination of comma-separated values.")
    print("Outputs go to hydra.run.dir (default outputs/DATE/TIME) or, with -m, to")
    print("hydra.sweep.dir/N (default multirun/DATE/TIME/N) plus a sweep summary.csv.\n")
    print(_groups_text())
    print("\nshow every key and its value: gradsync run --cfg job [overrides]")
    print("Hydra's own options:           gradsync run --hydra-help")


def _run_command(args: list[str]) -> int:
    if any(a in ("-h", "--help") for a in args):
        _print_run_help()
        return 0
    register_schemas()
    try:
        run = parse_run_args(args)
        args = _hydra_args(run)
    except ConfigError as exc:
        _fail(str(exc))
    _outcomes.command = shlex.join(["gradsync", "run", *args])
    multirun = "-m" in args
    if multirun:
        positions = [i for i, a in enumerate(args) if "=" in a and not a.startswith("-")]
        deferred = defer_keys_of_swept_groups([args[i] for i in positions])
        args = list(args)
        for i, text in zip(positions, deferred, strict=True):
            args[i] = text
    sys.argv = ["gradsync", *args]  # what Hydra parses
    try:
        _hydra_main()
    except Stopped as stop:
        if _outcomes.sweep_dir is not None:
            _summarize_stopped_sweep(stop, _outcomes.sweep_dir)
        raise
    if multirun:
        # Jobs may have run elsewhere (Slurm): count what their summaries say.
        statuses = SweepSummaryCallback.statuses
        failed = sum(status != "completed" for status in statuses)
        if failed:
            _fail(f"{failed} of {len(statuses)} jobs failed; see summary.csv", code=1)
        return 0
    return 1 if _outcomes.failed else 0


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
    path = write_sweep_summary(sweep_dir, expected_jobs=_outcomes.jobs)
    completed = _outcomes.finished - _outcomes.failed
    print(
        f"gradsync: error: {stop.reason}; {completed} of {_outcomes.jobs} jobs of the sweep "
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
    _outcomes.jobs = len(checked)
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


def main(argv: list[str] | None = None) -> int:
    try:
        with stop_on_signals():
            return _main(sys.argv[1:] if argv is None else argv)
    except Stopped as stop:
        if not stop.reported:
            print(f"gradsync: error: {stop.reason}", file=sys.stderr)
        return stop.exit_code
    except BrokenPipeError:  # output piped into head, less, ...: stop quietly, as other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def _main(args: list[str]) -> int:
    if not args or args[0] in ("-h", "--help"):
        _print_help()
        return 0
    if args[0] == "--version":
        print(f"gradsync {__version__}")
        return 0
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        _fail(f"unknown command '{command}'; valid commands: {', '.join(COMMANDS)}")
    if command == "sweep":
        from gradsync.cli import sweep as sweep_cli

        register_schemas()
        return sweep_cli.main(rest)
    if command == "plan":
        from gradsync.cli import plan as plan_cli

        register_schemas()
        return plan_cli.main(rest)
    if command == "simulate":
        from gradsync.cli import simulate as simulate_cli

        register_schemas()
        return simulate_cli.main(rest)
    if command == "report":
        from gradsync.cli import report as report_cli

        return report_cli.main(rest)
    return _run_command(rest)
