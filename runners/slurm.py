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
import re
import shutil
import signal
import subprocess
import time

from gradsync.dist.env import first_slurm_host, slurm_port
from runners.base import WorkerFailure
from runners.task import TaskRunner

STOPPED_WAIT_S = 300.0  # longer than any sensible KillWait
TEST_ONLY_TIMEOUT_S = 60  # sbatch retries an unreachable controller for a while


def refused_submission(options: list[str]) -> str | None:
    """What Slurm says against a job with these sbatch ``options``, asked with ``sbatch
    --test-only`` (nothing is submitted); None when it would take the job."""
    command = ["sbatch", "--test-only", *options, "--wrap", "true"]
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=TEST_ONLY_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return f"sbatch --test-only had no answer from the controller in {TEST_ONLY_TIMEOUT_S} s"
    if result.returncode == 0:
        return None
    lines = [line.strip() for line in result.stderr.splitlines() if line.strip()]
    # A fatal line says why sbatch gave up; else the first error is the specific one (the
    # later ones repeat it as "Batch job submission failed").
    fatal = [line for line in lines if ": fatal: " in line]
    errors = [line for line in lines if ": error: " in line]
    reasons = fatal or errors or lines or [f"sbatch exited with {result.returncode}"]
    return re.sub(r"^sbatch: (error|fatal): ", "", reasons[0])


def missing_sbatch() -> str | None:
    if shutil.which("sbatch") is None:
        return "runner=slurm needs Slurm's sbatch on PATH (run from a node of your Slurm cluster)"
    return None


class SlurmRunner(TaskRunner):
    launcher = "slurm"

    def __init__(
        self,
        *,
        workers: int,
        nodes: int = 1,
        report_grace_s: float = 3.0,
        **resources: object,
    ) -> None:
        # ``resources`` (partition, time, GPUs, ...) were used by the launcher to submit the job.
        super().__init__(
            workers=workers,
            task=int(os.environ.get("SLURM_PROCID", "0")),
            tasks=int(os.environ.get("SLURM_NTASKS", "0")),
            report_grace_s=report_grace_s,
        )
        self.nodes = nodes
        self.restarted = int(os.environ.get("SLURM_RESTART_COUNT", "0")) > 0

    def rank_env(self) -> dict[str, str]:
        return {
            "RANK": str(self.task),
            "WORLD_SIZE": str(self.workers),
            "LOCAL_RANK": os.environ.get("SLURM_LOCALID", "0"),
            "MASTER_ADDR": first_slurm_host(os.environ.get("SLURM_JOB_NODELIST", "")),
            "MASTER_PORT": str(slurm_port(os.environ.get("SLURM_JOB_ID", "0"))),
        }

    def stopped(self, code: int) -> None:
        if code in (128 + signal.SIGTERM, -signal.SIGTERM):
            # Slurm is stopping the job (requeue after preemption or time limit, scancel).
            # Leave no result behind: a requeued run resumes and reports. Slurm kills this
            # task after its KillWait.
            time.sleep(STOPPED_WAIT_S)

    def describe(self, failure: WorkerFailure) -> WorkerFailure:
        return WorkerFailure(
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
