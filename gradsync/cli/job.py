"""One job of ``gradsync run``, as Hydra calls it for each job (in this process): the resolved
config written to the run directory, the runner started, the outcome in summary.json."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from gradsync.config.instantiate import build
from gradsync.jobs.compose import ConfigError, check_config, write_resolved
from gradsync.launch import Runner, WorkerFailure, worker_launch
from gradsync.metrics.summary import write_summary
from gradsync.stop_signals import Stopped
from gradsync.train.checkpoint import LATEST

log = logging.getLogger("gradsync")

_EVAL_SHOWN = (
    ("eval/accuracy", "accuracy"),
    ("eval/accuracy_top5", "top-5"),
    ("eval/perplexity", "perplexity"),
    ("eval/hr@10", "HR@10"),
)


class Invocation:
    """This command and what happened to its jobs (Hydra runs them in this process)."""

    def __init__(self) -> None:
        self.command = "gradsync"
        self.finished = 0
        self.failed = 0
        self.jobs = 1
        self.sweep_dir: Path | None = None
        """Where a sweep's jobs go (set once its first job starts)."""


outcomes = Invocation()


def run_job(cfg: DictConfig) -> None:
    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    if hydra_cfg.mode == RunMode.MULTIRUN:
        outcomes.sweep_dir = Path(hydra_cfg.sweep.dir)
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
            check_config(cfg)  # a damaged checkpoint fails the job in one line, not its workers
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
        command=outcomes.command,
        overrides=overrides,
        config_path=config_path,
        started=started,
        ended=time.time(),
        error=error,
    )
    outcomes.finished += 1
    if status == "completed":
        log.info(_summary_line(summary))
        return
    outcomes.failed += 1
    in_sweep = outcomes.sweep_dir is not None
    if stopped is None or not in_sweep:  # a stopped sweep says it once, for all its jobs
        log.error(f"gradsync: error: {error} (run dir: {run_dir})")
    if stopped is not None:
        stopped.reported = not in_sweep
        raise stopped  # no further job of a sweep starts


def _has_checkpoint(run_dir: Path) -> bool:
    """The job saved a checkpoint before it was requeued (restarted before its first: it starts
    over). A damaged one counts: resuming from it is refused, never silently started over."""
    return (run_dir / "checkpoints" / LATEST).exists()


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
