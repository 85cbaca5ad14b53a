"""The contract between gradsync and the runners that start its worker processes.

gradsync builds a runner from the composed config (``runner._target_``, through the one
``instantiate`` call site) and talks to it only through the protocols here; the ``runners``
package implements them and may import gradsync, never the other way round. A worker learns
how it was started only from its environment (``gradsync.cluster.env.DistEnv``).
"""

from __future__ import annotations

import sys
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable


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


class PeerLost(RuntimeError):
    """A worker lost its connection to a peer: another rank died or was stopped. The worker
    raises it for its backend's error and reports it (type ``PeerLost``) in one line, with no
    traceback; a runner never names it as the job's cause while another rank's report or
    death does."""


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


# ---- where ranks run on this host -----------------------------------------------------------
class Placement(Protocol):
    """Where each rank of a group of processes on this host runs, and how it reaches rank 0."""

    def command(self, rank: int, argv: list[str]) -> list[str]:
        """``argv`` as rank ``rank`` runs it."""
        ...

    def env(self, rank: int) -> dict[str, str]:
        """What rank ``rank`` needs in its environment to find rank 0 and its links."""
        ...


@runtime_checkable
class PlacesRanksHere(Protocol):
    """A runner that starts every rank of a job on this host. ``gradsync simulate`` starts its
    link probes where such a runner would start the job's workers (on its shaped links, say)."""

    def placement(self, ranks: int) -> AbstractContextManager[Placement]:
        """``ranks`` ranks placed as this runner places a job's; whatever it builds for them
        (network namespaces, links) lasts until the context exits."""
        ...


class Loopback:
    """Plain processes of this host, reaching rank 0 over loopback."""

    def command(self, rank: int, argv: list[str]) -> list[str]:
        return argv

    def env(self, rank: int) -> dict[str, str]:
        return {"MASTER_ADDR": "127.0.0.1"}
