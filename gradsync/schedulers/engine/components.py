"""What every synchronization strategy is built from: a compressor bound to the job's
collective, an error-feedback memory, the clock its timings are read from, fp16's loss scale
when the job has one, and (once attached) its one communication thread."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

from gradsync.schedulers.engine.combine import combine
from gradsync.schedulers.engine.comm_thread import CommThread
from gradsync.schedulers.engine.exchange import Bucket, Exchanged, R, Received, Send
from gradsync.schedulers.engine.loss_scale import LossScale
from gradsync.schedulers.engine.queued_collective import QueuedCollective
from gradsync.schedulers.engine.step_timer import StepTimer
from gradsync.types import Collective, Compressor, ErrorFeedback, GroupInfo, OwnMemory, Payload


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
        loss_scale: LossScale | None = None,
    ) -> None:
        self.compressor = compressor
        self.feedback = feedback
        self.collective = collective
        compressor.bind(collective)  # selection that talks (union, CLT-k, DEFT) uses this group
        self.clock = clock
        self.run_dir = run_dir
        """Where a scheduler may save what it measured (None: nowhere)."""
        self.loss_scale = loss_scale
        """fp16: gradients arrive scaled; only schedulers whose registry entry says
        ``loss_scaling`` are given one (their ``step`` ends in ``apply_update``)."""
        self._comm: CommThread | None = None
        self._queued: QueuedCollective | None = None
        self._device: torch.device | None = None
        """Where the model lives, once attached: where restored state goes."""
        self._before_step: tuple[object, object] | None = None

    def start_comm(self, device: torch.device) -> tuple[CommThread, StepTimer]:
        """The scheduler's one communication thread (and CUDA stream) and its step timer on
        ``device``. From now on the compressor's collectives, and the loop's metrics, are jobs
        for that thread, in its one order."""
        self._device = device
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

    def exchange(self, bucket: Bucket, send: Send[R], *, scratch: bool = False) -> Exchanged[R]:
        """The one way a bucket leaves a worker, whatever the family (``exchange.py``): its
        gradient compensated and compressed (``compress_with_feedback``), the payload handed to
        the family's ``send``, and the bucket's future returned."""
        payload, ctx = self.compress_with_feedback(
            bucket.gradient, group=bucket.info, scratch=scratch
        )
        return Exchanged(bucket, payload, ctx, send(bucket, payload, ctx))

    def combined(
        self,
        exchanged: Exchanged[Received],
        received: Received,
        *,
        out: Tensor | None = None,
        scratch: Tensor | None = None,
    ) -> tuple[Tensor, int | Tensor | None]:
        """What came back for ``exchanged`` as the bucket's sum over workers, and how many
        elements' values travelled (``combine``)."""
        like = exchanged.bucket.gradient
        return combine(
            self.compressor, received, exchanged.ctx, like=like, out=out, scratch=scratch
        )

    def compress_with_feedback(
        self, flat: Tensor, *, group: GroupInfo, scratch: bool = False
    ) -> tuple[Payload, Any]:
        """Compensate ``flat`` (the gradients of ``group``) with its error-feedback residual,
        compress it, and keep what the compression left out as the new residual. Under a loss
        scale, ``flat`` is unscaled first, in place. ``scratch``: the caller reads no value of
        ``flat`` afterwards (a copy it made), so it is compensated in place, and may become the
        residual: no gradient-sized tensor is allocated for either."""
        if self.loss_scale is not None:
            self._remember_state()
            self.loss_scale.unscale_(flat)
        compensated = self.feedback.compensate(flat, name=group.name, in_place=scratch)
        payload, ctx = self.compressor.compress(compensated, group=group)
        if not self.feedback.remembers:  # nothing to keep, so no need to know what was sent
            return payload, ctx
        sent = (
            self.compressor.selected(payload, ctx)
            if self.compressor.sends_selected_values
            else None
        )
        if sent is None:
            transmitted = self.compressor.decompress(payload, ctx)
            self.feedback.update(compensated, transmitted, name=group.name)
        else:  # no dense decompressed copy: the residual is compensated less the sent indices
            self.feedback.forget_sent(compensated, sent, name=group.name)
        return payload, ctx

    def memory_norm(self) -> Tensor:
        """The error memory's norm: the compressor's own when it keeps one, else the
        feedback's."""
        if isinstance(self.compressor, OwnMemory):
            return self.compressor.memory_norm()
        return self.feedback.norm()

    # ---- fp16: every worker steps, or every worker skips ------------------------------------
    def _remember_state(self) -> None:
        """Before the step's first compression: what a skipped step must give back (the
        residuals as they are, kept without a copy; the compressor's state, copied where it
        lives: ``state_dict`` is the checkpoints', through the host)."""
        if self._before_step is None:
            self._before_step = (self.feedback.snapshot(), self.compressor.snapshot())

    def agree_on_overflow(self) -> Callable[[], Tensor | None]:
        """fp16: after the step's exchanges, in the communication thread's order, the maximum
        over workers of each one's overflow flag (4 bytes, counted with the step's traffic).
        The returned function waits for it; without a loss scale it gives None."""
        if self.loss_scale is None:
            return lambda: None
        assert self._comm is not None, "attach() before training"
        scale = self.loss_scale
        # Read in the job, on the stream the groups unscale on: a group the thread compresses
        # queues its unscaling there only when it runs, after this job's submission.
        job = self._comm.submit(
            lambda: self.collective.all_reduce((scale.overflow(),), op="max"), on_my_stream=True
        )
        return lambda: job.wait()[0]

    def apply_update(self, optimizer: Optimizer, overflow: Tensor | None) -> bool:
        """Step ``optimizer`` with the written-back gradients; whether it stepped. Under a loss
        scale, through GradScaler: when any worker overflowed (``overflow``, from
        ``agree_on_overflow``), every worker skips, and residuals and compressor state are as
        before the step."""
        if overflow is None:  # no loss scale
            optimizer.step()
            return True
        assert self.loss_scale is not None
        stepped = self.loss_scale.step(optimizer, overflow)
        if not stepped and self._before_step is not None:
            feedback, compressor = self._before_step
            self.feedback.restore(feedback)
            self.compressor.restore(compressor)
            mark_stepped(optimizer)  # the LR schedule moves on, as it does under DDP's AMP
        self._before_step = None
        return stepped

    # ---- checkpoints: what every scheduler saves with its own state --------------------------
    def _here(self, state: Any) -> Any:
        """``state`` with its tensors (in dicts, lists and tuples) on the model's device once
        attached, and as it is before."""
        device = self._device
        if device is None:
            return state
        if isinstance(state, Tensor):
            return state.to(device)
        if isinstance(state, Mapping):
            return {key: self._here(value) for key, value in state.items()}
        if isinstance(state, list | tuple) and not hasattr(state, "_fields"):
            return type(state)(self._here(value) for value in state)
        return state

    def components_state(self) -> dict[str, Any]:
        return {"feedback": self.feedback.state_dict(), "compressor": self.compressor.state_dict()}

    def load_components_state(self, state: Mapping[str, Any]) -> None:
        """Restore what ``components_state`` saved, onto the model's device once attached (a
        checkpoint is read on the host; state left there would mix devices with the rest)."""
        self.feedback.load_state_dict(self._here(state["feedback"]))
        # A checkpoint written before compressors kept state has none.
        self.compressor.load_state_dict(self._here(state.get("compressor", {})))


def mark_stepped(optimizer: Optimizer) -> None:
    """The update was made elsewhere (by a parameter server, or layer by layer in the next
    forward pass): tell the LR scheduler, which otherwise warns that the optimizer was skipped."""
    optimizer._opt_called = True  # type: ignore[attr-defined]


def gradient_of(param: Tensor) -> Tensor:
    """A parameter's gradient, flat; zeros when it got none this step (an unused layer)."""
    return param.grad.reshape(-1) if param.grad is not None else torch.zeros_like(param).reshape(-1)


def copy_gradients(params: Sequence[Tensor], into: Sequence[Tensor]) -> None:
    """Each parameter's gradient copied into its tensor of ``into`` (shaped as it), zeros for
    one that got none this step: one batched copy, not a launch per tensor."""
    grads = [p.grad for p in params]
    if all(g is not None for g in grads):
        torch._foreach_copy_(list(into), grads)  # type: ignore[arg-type]
        return
    for grad, target in zip(grads, into, strict=True):
        if grad is None:
            target.zero_()
        else:
            target.copy_(grad)


def flat_gradient(params: Sequence[Tensor]) -> Tensor:
    return torch.cat([gradient_of(p) for p in params])
