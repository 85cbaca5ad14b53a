"""Real ``gradsync run`` jobs of ``benchmarks.gpu``: one worker, the whole path (data, loop,
logging, a runner's processes), read back from the run's ``metrics.jsonl`` once it is steady."""

from __future__ import annotations

import statistics
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.gpu_tables import reported
from benchmarks.measure import run_job
from gradsync.metrics.summary import read_metrics

SETTLING_WINDOWS = 2
"""Log windows left out as the run settles (CUDA's and cuDNN's first calls, planning steps)."""
PARTS = ("data", "forward", "backward", "compress", "comm", "update")
"""The split of an iteration the loop logs as ``time/PART``."""
QUIET = ("logger.progress=false", "trainer.checkpoint=false", "dataset.num_test_samples=256")
"""No progress bar and no checkpoints; a short final evaluation (a synthetic dataset's)."""
RUN_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class RunSizes:
    """``steps`` steps, logged every ``log_every``: ``steps // log_every`` windows."""

    steps: int
    log_every: int

    def overrides(self) -> list[str]:
        return [f"trainer.max_steps={self.steps}", f"trainer.log_every={self.log_every}"]


@dataclass(frozen=True)
class Steady:
    """A run once it settled: the median over its log windows after the first few."""

    samples_per_s: float
    seconds: dict[str, float]
    """Median seconds of each part of an iteration (``PARTS``) and of the whole
    (``iteration``)."""

    def share(self, part: str) -> float:
        """The part's share of the iteration."""
        return self.seconds[part] / self.seconds["iteration"]


@dataclass(frozen=True)
class RunResult:
    """What a run measured, or why it measured nothing."""

    steady: Steady | None
    error: str | None = None


def steady(run_dir: Path) -> Steady:
    """The run's steady numbers; ValueError when it logged no window past settling."""
    windows = [r for r in read_metrics(run_dir) if "train/loss" in r][SETTLING_WINDOWS:]
    if not windows:
        raise ValueError(f"no log window past the first {SETTLING_WINDOWS}: run more steps")
    keys = [f"time/{part}" for part in (*PARTS, "iteration")]
    return Steady(
        samples_per_s=statistics.median(w["perf/samples_per_s"] for w in windows),
        seconds={
            key.split("/")[1]: statistics.median(w[key] for w in windows)
            for key in keys
            if all(key in w for w in windows)
        },
    )


def measured_run(
    overrides: Sequence[str], sizes: RunSizes, run_dir: Path, timeout: float = RUN_TIMEOUT_S
) -> RunResult:
    """``gradsync run OVERRIDES`` for ``sizes``; its steady numbers, or the reason it has none
    (a failed or stopped run is a row of the table, not the end of it)."""
    job = [*overrides, *QUIET, *sizes.overrides()]
    try:
        return RunResult(steady(run_job(job, run_dir, timeout=timeout)))
    except (RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
        return RunResult(None, reported(exc))
