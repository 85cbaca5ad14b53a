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
import signal
import time

from gradsync.cluster.env import first_slurm_host, slurm_port, slurm_tasks_per_node
from gradsync.launch import WorkerFailure
from gradsync.launch.options import SlurmRunnerConfig
from runners.task import TaskRunner

STOPPED_WAIT_S = 300.0  # longer than any sensible KillWait


class SlurmRunner(TaskRunner):
    launcher = "slurm"

    def __init__(
        self,
        *,
        workers: int,
        nodes: int = SlurmRunnerConfig.nodes,
        report_grace_s: float = SlurmRunnerConfig.report_grace_s,
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
            "LOCAL_WORLD_SIZE": str(slurm_tasks_per_node(os.environ)),
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
