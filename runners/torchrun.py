"""``runner=torchrun``: for jobs started under ``torchrun`` (one node or many).

    torchrun --nproc-per-node 4 -m gradsync run runner=torchrun trainer.workers=4

torchrun starts one gradsync process per worker with RANK, WORLD_SIZE, LOCAL_RANK and
MASTER_ADDR/PORT set; each runs the job and starts its own worker with them. All processes, on
every node, share the run directory (by default one they agree on through torchrun's store,
``gradsync/cluster/run_name.py``); rank 0 writes the summary. When a worker fails, torchrun stops
the others and the job reports the first failure.
"""

from __future__ import annotations

import os
import signal
from types import FrameType

from gradsync.cluster.env import TORCHRUN_VARS
from gradsync.launch import Launch
from gradsync.launch.options import TorchrunRunnerConfig
from runners.task import TaskRunner


class Stopped(Exception):
    """torchrun is stopping this process (a peer failed)."""


def _raise_stopped(signum: int, frame: FrameType | None) -> None:
    raise Stopped


class TorchrunRunner(TaskRunner):
    launcher = "torchrun"

    def __init__(
        self, *, workers: int, report_grace_s: float = TorchrunRunnerConfig.report_grace_s
    ) -> None:
        super().__init__(
            workers=workers,
            task=int(os.environ.get("RANK", "0")),
            tasks=int(os.environ.get("WORLD_SIZE", "0")),
            report_grace_s=report_grace_s,
        )

    def rank_env(self) -> dict[str, str]:
        return {var: os.environ[var] for var in TORCHRUN_VARS}

    def run(self, launch: Launch) -> None:
        # torchrun stops every process with SIGTERM when one fails; unwind instead of dying,
        # so rank 0 still reports which rank failed first.
        previous = signal.signal(signal.SIGTERM, _raise_stopped)
        try:
            super().run(launch)
        except Stopped:
            raise self.failure(launch, 128 + signal.SIGTERM) from None
        finally:
            signal.signal(signal.SIGTERM, previous)
