"""What every runner takes (a Launch) and raises (WorkerFailure)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    """The worker command, run once per rank."""
    run_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment for every worker."""


def worker_launch(config_path: Path, run_dir: Path, *, threads: int) -> Launch:
    """The job's worker (``gradsync.train.worker``) on its resolved config, with ``threads``
    compute threads."""
    argv = [sys.executable, "-m", "gradsync.train.worker", "--config", str(config_path)]
    return Launch(
        argv=[*argv, "--run-dir", str(run_dir)],
        run_dir=run_dir,
        env={"OMP_NUM_THREADS": str(threads)},
    )


class WorkerFailure(RuntimeError):
    """One rank failed; the job was stopped. ``str()`` is the one-line reason."""

    def __init__(self, *, rank: int, reason: str, detail: str = "") -> None:
        super().__init__(f"rank {rank} failed: {reason}")
        self.rank = rank
        self.reason = reason
        self.detail = detail


class Runner(Protocol):
    reports_outcome: bool
    """This process writes the job's summary. False in all but task 0 of a job whose workers
    are started by the scheduler (Slurm starts one task per worker, each running the job)."""

    restarted: bool
    """The scheduler restarted this job (requeued after preemption or its time limit): it
    continues from its own last checkpoint, if it saved one."""

    def run(self, launch: Launch) -> None:
        """Run the job to completion; raise WorkerFailure if any worker fails."""
        ...
