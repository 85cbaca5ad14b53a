"""``runner=slurm``: a sweep becomes one Slurm job array, submitted by Hydra's submitit launcher.

Each array element is one job of the sweep, with ``trainer.workers`` tasks (``runner.nodes``
nodes, workers/nodes tasks each) started by Slurm's ``srun``. Every task runs the job's entry
point, which lands here: the task starts its own worker, whose rank, world size and master
address come from Slurm's environment (``SLURM_PROCID``, ``SLURM_NTASKS``, the first host of
``SLURM_JOB_NODELIST``). Task 0 writes the run's summary; on failure it names the rank that
failed first (from the error reports every worker leaves in the run directory) and the Slurm
log to read.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

from gradsync.dist.env import first_slurm_host, slurm_port
from runners.base import Launch, WorkerFailure
from runners.reports import error_file, read_error_reports, root_cause

ERRORS_DIR = ".errors"
STOPPED_WAIT_S = 300.0  # longer than any sensible KillWait


def missing_sbatch() -> str | None:
    if shutil.which("sbatch") is None:
        return "runner=slurm needs Slurm's sbatch on PATH (run from a node of your Slurm cluster)"
    return None


class SlurmRunner:
    def __init__(
        self,
        *,
        workers: int,
        nodes: int = 1,
        report_grace_s: float = 3.0,
        **resources: object,
    ) -> None:
        # ``resources`` (partition, time, GPUs, ...) were used by the launcher to submit the job.
        self.workers = workers
        self.nodes = nodes
        self.report_grace_s = report_grace_s
        self.task = int(os.environ.get("SLURM_PROCID", "0"))
        self.reports_outcome = self.task == 0
        self.restarted = int(os.environ.get("SLURM_RESTART_COUNT", "0")) > 0

    def run(self, launch: Launch) -> None:
        tasks = int(os.environ.get("SLURM_NTASKS", "0"))
        if tasks < self.workers:
            raise WorkerFailure(
                rank=self.task,
                reason=f"the Slurm job has {tasks} tasks for trainer.workers={self.workers}; "
                "submit jobs with gradsync run ... runner=slurm",
            )
        if self.task >= self.workers:
            return  # the array is shaped for the sweep's largest job; this one needs fewer
        errors = launch.run_dir / ERRORS_DIR
        errors.mkdir(parents=True, exist_ok=True)
        job_id = os.environ.get("SLURM_JOB_ID", "0")
        env = {
            **os.environ,
            **launch.env,
            "RANK": str(self.task),
            "WORLD_SIZE": str(self.workers),
            "LOCAL_RANK": os.environ.get("SLURM_LOCALID", "0"),
            "MASTER_ADDR": first_slurm_host(os.environ.get("SLURM_JOB_NODELIST", "")),
            "MASTER_PORT": str(slurm_port(job_id)),
            "GRADSYNC_LAUNCHER": "slurm",
            "GRADSYNC_ERROR_FILE": str(error_file(errors, self.task)),
            "GRADSYNC_PROGRESS": "0",
            "PYTHONUNBUFFERED": "1",
        }
        # The worker's output goes to this task's Slurm log.
        code = subprocess.run(
            launch.argv, env=env, stdin=subprocess.DEVNULL, check=False
        ).returncode
        if code == 0:
            return
        if code in (128 + signal.SIGTERM, -signal.SIGTERM):
            # Slurm is stopping the job (requeue after preemption or time limit, scancel).
            # Leave no result behind: a requeued run resumes and reports. Slurm kills this
            # task after its KillWait.
            time.sleep(STOPPED_WAIT_S)
            raise WorkerFailure(rank=self.task, reason="stopped by Slurm and not killed after")
        # Peers fail a moment later with closed connections; give the first report time to land.
        deadline = time.monotonic() + self.report_grace_s
        reports = read_error_reports(errors)
        while time.monotonic() < deadline and len(reports) < self.workers:
            time.sleep(0.2)
            reports = read_error_reports(errors)
        failure = root_cause({self.task: code}, reports)
        raise WorkerFailure(
            rank=failure.rank,
            reason=f"{failure.reason} (Slurm log: {slurm_log(failure.rank)})",
            detail=failure.detail,
        )


def slurm_log(task: int) -> str:
    """The Slurm log (stderr) of ``task`` of this job, as submitit names it."""
    if "SUBMITIT_FOLDER" not in os.environ:
        return "the job's Slurm output"
    import submitit
    from submitit.core.utils import JobPaths

    job = submitit.JobEnvironment()
    return str(JobPaths(job.paths.folder, job_id=job.job_id, task_id=task).stderr)
