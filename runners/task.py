"""Runners for launchers that start one process per worker themselves (Slurm's srun, torchrun).

Every such process runs the job's entry point and ends up here: it starts its own worker with
the rank the launcher gave it and waits for it. Task 0 reports the job's outcome; when a worker
fails it names the rank that failed first, from the error reports every worker leaves in the
run directory.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from gradsync.launch import Launch, WorkerFailure
from gradsync.stop_signals import stopping
from runners.reports import error_file, read_error_reports, root_cause, stopped_rank

ERRORS_DIR = ".errors"  # inside the run directory, which every task can see


class TaskRunner:
    launcher: str
    """Name of the launcher, for GRADSYNC_LAUNCHER and messages."""
    restarted = False

    def __init__(self, *, workers: int, task: int, tasks: int, report_grace_s: float) -> None:
        self.workers = workers
        self.task = task
        self.tasks = tasks
        self.report_grace_s = report_grace_s
        self.reports_outcome = task == 0

    # ---- what a launcher's runner says ---------------------------------------------------
    def rank_env(self) -> dict[str, str]:
        """RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT for this task's worker."""
        raise NotImplementedError

    def stopped(self, code: int) -> None:
        """Called when the worker exited with ``code`` != 0, before the failure is reported."""

    def describe(self, failure: WorkerFailure) -> WorkerFailure:
        """The failure as reported (a launcher may add where its logs are)."""
        return failure

    # ---- the shared part -----------------------------------------------------------------
    def run(self, launch: Launch) -> None:
        if self.tasks < self.workers:
            raise WorkerFailure(
                rank=self.task,
                reason=f"{self.launcher} started {self.tasks} processes for "
                f"trainer.workers={self.workers}",
            )
        if self.task >= self.workers:
            return  # shaped for a larger job (one Slurm array for a whole sweep)
        errors = launch.run_dir / ERRORS_DIR
        errors.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            **launch.env,
            **self.rank_env(),
            "GRADSYNC_LAUNCHER": self.launcher,
            "GRADSYNC_ERROR_FILE": str(error_file(errors, self.task)),
            "GRADSYNC_PROGRESS": "0",
            "PYTHONUNBUFFERED": "1",
        }
        # The worker's output goes where the launcher sends this process's output.
        code = subprocess.run(launch.argv, env=env, stdin=subprocess.DEVNULL, check=False)
        if code.returncode == 0:
            return
        self.stopped(code.returncode)
        stopped = stopped_rank({self.task: code.returncode})
        if stopped is not None:  # SIGINT or SIGTERM reached this task's worker: a stop, as local's
            raise stopping(stopped[1], rank=self.task)
        raise self.failure(launch, code.returncode)

    def failure(self, launch: Launch, code: int) -> WorkerFailure:
        """The job's failure, once this task's worker exited with ``code``."""
        reports = self._reports(launch.run_dir / ERRORS_DIR)
        return self.describe(root_cause({self.task: code}, reports))

    def _reports(self, errors: Path) -> list[dict]:
        # Peers fail a moment later with closed connections; give the first report time to land.
        deadline = time.monotonic() + self.report_grace_s
        reports = read_error_reports(errors)
        while time.monotonic() < deadline and len(reports) < self.workers:
            time.sleep(0.2)
            reports = read_error_reports(errors)
        return reports
