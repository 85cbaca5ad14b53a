"""What every synchronization strategy is built from: a compressor bound to the job's
collective, an error-feedback memory, and the clock its timings are read from."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gradsync.types import Collective, Compressor, ErrorFeedback


class SyncComponents:
    def __init__(
        self,
        *,
        compressor: Compressor,
        feedback: ErrorFeedback,
        collective: Collective,
        clock: Callable[[], float],
        run_dir: Path | None = None,
    ) -> None:
        self.compressor = compressor
        self.feedback = feedback
        self.collective = collective
        compressor.bind(collective)  # selection that talks (union, CLT-k, DEFT) uses this group
        self.clock = clock
        self.run_dir = run_dir
        """Where a scheduler may save what it measured (None: nowhere)."""

    def flush(self) -> None:
        """Nothing is left in flight after ``step`` unless a scheduler says otherwise."""
