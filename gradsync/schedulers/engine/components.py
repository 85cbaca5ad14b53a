"""What every synchronization strategy is built from: a compressor bound to the job's
collective, an error-feedback memory, the clock its timings are read from, and (once attached)
its one communication thread."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

from gradsync.schedulers.engine.comm_thread import CommThread
from gradsync.schedulers.engine.queued_collective import QueuedCollective
from gradsync.schedulers.engine.step_timer import StepTimer
from gradsync.types import Collective, Compressor, ErrorFeedback, GroupInfo, Payload


class SyncComponents:
    workers_in_lockstep = True

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
        self._comm: CommThread | None = None
        self._queued: QueuedCollective | None = None

    def start_comm(self, device: torch.device) -> tuple[CommThread, StepTimer]:
        """The scheduler's one communication thread (and CUDA stream) and its step timer on
        ``device``. From now on the compressor's collectives, and the loop's metrics, are jobs
        for that thread, in its one order."""
        comm, timer = CommThread(device), StepTimer(device)
        self._comm, self._queued = comm, QueuedCollective(self.collective, comm, timer)
        self.compressor.bind(self._queued)
        return comm, timer

    def metrics_collective(self) -> Collective:
        """The workers' collective for the loop's logged metrics: through the communication
        thread once there is one, so that a metrics all-reduce takes its place after the
        exchanges a step left in flight (the same place on every rank), never beside them."""
        return self.collective if self._queued is None else self._queued

    def flush(self) -> None:
        """Nothing is left in flight after ``step`` unless a scheduler says otherwise."""

    def close(self) -> None:
        """Stop the communication thread once what was submitted has run (after ``flush``)."""
        if self._comm is not None:
            self._comm.close()
            self._comm, self._queued = None, None
            self.compressor.bind(self.collective)

    def compress_with_feedback(self, flat: Tensor, *, group: GroupInfo) -> tuple[Payload, Any]:
        """Compensate ``flat`` (the gradients of ``group``) with its error-feedback residual,
        compress it, and keep what the compression left out as the new residual."""
        compensated = self.feedback.compensate(flat, name=group.name)
        payload, ctx = self.compressor.compress(compensated, group=group)
        transmitted = self.compressor.decompress(payload, ctx)
        self.feedback.update(compensated, transmitted, name=group.name)
        return payload, ctx

    # ---- checkpoints: what every scheduler saves with its own state --------------------------
    def components_state(self) -> dict[str, Any]:
        return {"feedback": self.feedback.state_dict(), "compressor": self.compressor.state_dict()}

    def load_components_state(self, state: Mapping[str, Any]) -> None:
        self.feedback.load_state_dict(state["feedback"])
        # A checkpoint written before compressors kept state has none.
        self.compressor.load_state_dict(state.get("compressor", {}))


def mark_stepped(optimizer: Optimizer) -> None:
    """The update was made elsewhere (by a parameter server, or layer by layer in the next
    forward pass): tell the LR scheduler, which otherwise warns that the optimizer was skipped."""
    optimizer._opt_called = True  # type: ignore[attr-defined]


def gradient_of(param: Tensor) -> Tensor:
    """A parameter's gradient, flat; zeros when it got none this step (an unused layer)."""
    return param.grad.reshape(-1) if param.grad is not None else torch.zeros_like(param).reshape(-1)


def flat_gradient(params: Sequence[Tensor]) -> Tensor:
    return torch.cat([gradient_of(p) for p in params])
