"""What every runner takes (a Launch) and raises (WorkerFailure)."""

from __future__ import annotations

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


class WorkerFailure(RuntimeError):
    """One rank failed; the job was stopped. ``str()`` is the one-line reason."""

    def __init__(self, *, rank: int, reason: str, detail: str = "") -> None:
        super().__init__(f"rank {rank} failed: {reason}")
        self.rank = rank
        self.reason = reason
        self.detail = detail


class Runner(Protocol):
    def run(self, launch: Launch) -> None:
        """Run the job to completion; raise WorkerFailure if any worker fails."""
        ...
