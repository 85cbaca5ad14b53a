"""The step every all-reduce-style scheduler shares, written once; a scheduler supplies only its
policy: how tensors are grouped, and when a group goes.

Tensors are taken in backward order (the reverse of ``model.parameters()``) and split into
contiguous groups by a plan. Launching a group, on the compute side: flatten its gradients (in
model order), compensate with the error-feedback residual, compress, keep what was left out as
the new residual, and submit the exchange (all-reduce when payloads add up, else all-gather)
to the scheduler's one communication thread. ``step()`` launches what has not gone yet, waits
for the exchanges, combines and averages them, writes the gradients back, steps the optimizer
(under fp16's loss scale, every worker or none: ``SyncComponents.apply_update``) and reports
``SyncStats``.

A compressor that talks while it compresses (union top-k's gather of indices, TernGrad's
scalers, CLT-k, DEFT, PowerSGD) would make the hook wait for the other workers, group after
group. Once it has talked (seen at its first compression: the same group on every rank), every
later group is compressed by the communication thread instead, as one job that compresses and
starts the exchange; the hook only flattens and hands over, and ``step()`` waits. The order
of collectives stays the thread's FIFO order, the same on every rank; residuals and compressor
state are touched by that thread alone until ``step()`` has waited for every job. On CUDA the
job's kernels go on the training thread's stream, where the compression's state was made and
is used (a tensor freed after use on another stream could be handed out again too early).

Timings inside the step are ``StepTimer`` marks read at its end; profiled steps (a plan that
measures the job) also time with the synchronizing ``clock``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any, TypedDict

import torch
from torch import Tensor, nn
from torch.optim import Optimizer
from typing_extensions import NotRequired, Unpack

from gradsync.algorithms.merge_plans import Plan, check_plan, groups_of
from gradsync.durations import Duration
from gradsync.schedulers.engine.buckets import Buckets
from gradsync.schedulers.engine.comm_thread import CommThread, Job
from gradsync.schedulers.engine.components import SyncComponents, copy_gradients
from gradsync.schedulers.engine.exchange import Bucket, Exchanged, Received
from gradsync.schedulers.engine.group_buffers import GroupBuffers
from gradsync.schedulers.engine.group_info import GroupLayout
from gradsync.schedulers.engine.loss_scale import LossScale
from gradsync.schedulers.engine.queued_collective import AGREE
from gradsync.schedulers.engine.ready_order import ReadyOrder
from gradsync.schedulers.engine.residuals import flat_residual
from gradsync.schedulers.engine.step_timer import StepTimer
from gradsync.types import Collective, Compressor, ErrorFeedback, GroupInfo, Payload, SyncStats


class EngineParts(TypedDict):
    """What every scheduler built on the engine is given (``train/build.py``'s arguments, those
    of ``SyncComponents``); ``clock`` synchronizes, for timings that feed a plan."""

    compressor: Compressor
    feedback: ErrorFeedback
    collective: Collective
    clock: Callable[[], float]
    run_dir: NotRequired[Path | None]
    loss_scale: NotRequired[LossScale | None]


Finish = Callable[[], Payload]
"""Waits for a started all-reduce and gives its sum (on CUDA the caller's stream waits, not the
host)."""
Launched = Exchanged[Received] | Job[Exchanged[Received]]
"""A group's exchange, or the job that compresses it on the communication thread and starts
it."""


class ExchangeEngine(SyncComponents):
    def __init__(self, **parts: Unpack[EngineParts]) -> None:
        super().__init__(**parts)  # binds the compressor until attach() queues its calls
        self._params: list[nn.Parameter] = []
        self._optimizer: Optimizer | None = None
        self._comm: CommThread | None = None
        self._timer = StepTimer(torch.device("cpu"))
        self._plan: Plan = ()
        self._groups: list[range] = []
        self._group_of: list[int] = []
        self._layouts: list[GroupLayout] = []
        self._ready: ReadyOrder | None = None
        self._ready_in_group: dict[int, tuple[int, ...]] = {}
        """Each group's ``GroupInfo.ready``, taken at its first launch (its tensors are all in
        by then) and kept while the plan lasts."""
        self._launched: dict[int, Launched] = {}
        self._talks = False
        """The compressor talked while compressing: groups are compressed on the
        communication thread from then on."""
        self._buffers = GroupBuffers()
        self._step, self._epoch = 0, 0
        self.profiling = False
        """Time every compression and all-gather with ``clock`` (for a plan)."""
        self.selections: list[tuple[int, float]] = []
        """(elements, seconds) of each compression while profiling."""
        self.exchanges: list[tuple[float, float]] = []
        """(bytes sent, seconds) of each all-gather while profiling."""
        self.write_backs: list[tuple[int, float]] = []
        """(groups, seconds) of each step's averaging and write-back while profiling."""

    # ---- policy: what a scheduler defines ------------------------------------------------------
    def group_name(self, group: int) -> str:
        """The name a group's residual and compressor state go by."""
        return f"group{group}"

    def extra_metrics(self) -> dict[str, float]:
        return {}

    # ---- set-up --------------------------------------------------------------------------------
    def attach(self, model: nn.Module, optimizer: Optimizer) -> None:
        self._params = [p for p in model.parameters() if p.requires_grad][::-1]
        self._optimizer = optimizer
        self._ready = ReadyOrder(model, self._params)
        self._comm, self._timer = self.start_comm(self._params[0].device)

    def begin(self, *, step: int, epoch: int = 0) -> None:
        self._step, self._epoch = step, epoch
        if self._ready is not None:
            self._ready.stop_once_seen()

    def sizes(self) -> list[int]:
        """Elements per tensor, backward order."""
        return [p.numel() for p in self._params]

    def exchange_buckets(self) -> Buckets:
        """What each of a step's exchanges carries: element ranges of the flat gradient in
        backward order (a group's tensors, here)."""
        return Buckets.of_groups(self.sizes(), self._plan)

    def use_plan(self, plan: Plan) -> None:
        """Switch to ``plan`` (tensors per group, backward order), carrying every residual
        over to the new groups."""
        check_plan(plan, len(self._params))
        if self._plan and plan != self._plan:
            self._regroup_residuals(plan)
        self._plan = plan
        self._groups = groups_of(plan)
        self._group_of = [g for g, group in enumerate(self._groups) for _ in group]
        self._layouts = [
            GroupLayout.of(self.group_name(g), self._params, model_order(group))
            for g, group in enumerate(self._groups)
        ]
        self._launched = {}
        self._ready_in_group = {}
        self._buffers.clear()

    def _regroup_residuals(self, plan: Plan) -> None:
        """Every tensor's residual carried from its old group to its new one, on the device."""
        residuals = self.feedback.residuals()
        if not residuals:
            return
        sizes = self.sizes()
        like = self._params[0]
        per_tensor: dict[int, Tensor] = {}
        for g, group in enumerate(self._groups):  # still the old plan's
            order = model_order(group)
            numel = sum(sizes[i] for i in order)
            residual = flat_residual(residuals, self.group_name(g), numel, like=like)
            per_tensor.update(zip(order, residual.split([sizes[i] for i in order]), strict=True))
        self.feedback.replace_residuals(
            {
                self.group_name(g): torch.cat([per_tensor[i] for i in model_order(group)])
                for g, group in enumerate(groups_of(plan))
            }
        )

    # ---- one step ------------------------------------------------------------------------------
    def launch(self, group: int, *, in_backward: bool) -> None:
        """Compress group ``group`` and hand its exchange to the communication thread (once
        the compressor has talked, hand the compression over with it)."""
        assert self._comm is not None, "attach() before training"
        start = self._timer.mark()
        layout = self._layouts[group]
        flat = self._buffers.flat(group, layout.numel, layout.params[0])
        copy_gradients(layout.params, self._buffers.views(flat, layout.sizes, layout.shapes))
        info = GroupInfo(
            layout.name,
            self._step,
            self._epoch,
            layout.parts,
            len(self._params),
            ready=self._ready_of(group),
        )
        bucket = Bucket(group, flat, info)
        if self._talks:  # its kernels stay on this stream, with the state they use
            compress = partial(self._compress_and_send, bucket)
            self._launched[group] = self._comm.submit(compress, on_my_stream=True)
        else:
            self._launched[group] = self._compress_and_send(bucket)
        end = self._timer.mark()
        self._timer.add("compress", start, end)
        if in_backward:
            self._timer.add("in_backward", start, end)

    def _compress_and_send(self, bucket: Bucket) -> Exchanged[Received]:
        """Compress ``bucket`` and submit its exchange: on the training thread, or as one job
        of the communication thread (where the compressor's collectives and the exchange are
        issued at once, in that job's place)."""
        queued = self._queued
        assert queued is not None, "attach() before training"
        profiled = self.clock() if self.profiling else 0.0
        calls = queued.calls
        # flat is this step's copy, kept only for its shape (combine's like=).
        exchanged = self.exchange(bucket, self._submit, scratch=True)
        if queued.calls != calls:  # it waited for the thread (on the thread nothing counts)
            self._talks = True
        if self.profiling:
            self.selections.append((bucket.gradient.numel(), self.clock() - profiled))
        return exchanged

    def _submit(self, bucket: Bucket, payload: Payload, ctx: Any) -> Callable[[], Received]:
        """This engine's ``Send``: the exchange goes to the communication thread at once. The
        payload is not kept from reuse there: its ``Exchanged`` holds it until ``step()`` has
        waited for the exchange (and a flat buffer of ``GroupBuffers`` is never freed)."""
        assert self._comm is not None, "attach() before training"
        job = self._comm.submit(partial(self._start_exchange, payload))
        return partial(_received, job)

    def _ready_of(self, group: int) -> tuple[int, ...]:
        ready = self._ready_in_group.get(group)
        if ready is None:
            assert self._ready is not None, "attach() before training"
            ready = self._ready.of(model_order(self._groups[group]))
            self._ready_in_group[group] = ready
        return ready

    def _start_exchange(self, payload: Payload) -> Finish | list[Payload]:
        """On the communication thread: start summing the payloads, or gather every worker's.
        A sum is started without waiting for it, so the thread goes on to the next group's
        while the process group's own threads (gloo) or stream (NCCL) run this one, as DDP's
        reducer does; step() waits."""
        if self.compressor.allreducible:
            return self.collective.start_all_reduce(payload)
        return self._all_gather(payload)

    def _all_gather(self, payload: Payload) -> list[Payload]:
        same_shape = self.compressor.payload_same_shape
        if not self.profiling:
            return self.collective.all_gather(payload, same_shape=same_shape)
        start = self.clock()
        gathered = self.collective.all_gather(payload, same_shape=same_shape)
        sent = sum(t.numel() * t.element_size() for t in payload)
        self.exchanges.append((float(sent), self.clock() - start))
        return gathered

    def step(self, *, step: int, epoch: int = 0, loss: Tensor | None = None) -> SyncStats:
        assert self._optimizer is not None, "attach() before step()"
        self._step, self._epoch = step, epoch
        # A group that has not gone yet: launched after backward, or a parameter got no
        # gradient this step. In group order, the same on every worker.
        for group in range(len(self._groups)):
            if group not in self._launched:
                self.launch(group, in_backward=False)
        agreement = self.agree_on_overflow()  # fp16: after every exchange, on every worker
        waited = self._timer.mark()
        exchanged = self._wait_all()
        overflow = agreement()
        communicated = self._timer.mark()
        profiled = self.clock() if self.profiling else 0.0
        numel, selected = self._write_back(exchanged)
        if self.profiling:
            self.write_backs.append((len(self._groups), self.clock() - profiled))
        self._buffers.settle(stepped=self.apply_update(self._optimizer, overflow))
        self._timer.add("comm", waited, communicated)
        self._timer.add("update", communicated, self._timer.mark())
        self._launched = {}
        return self._stats(numel, selected)

    def _wait_all(self) -> dict[int, tuple[Exchanged[Received], Received]]:
        """Every group's exchange and its result; the first failure is raised once all have
        settled. Waited for from the last started: exchanges finish about in the order they
        started, so the earlier ones are done by then and the thread sleeps once rather than
        once per group."""
        results: dict[int, tuple[Exchanged[Received], Received]] = {}
        error: BaseException | None = None
        for group, launched in reversed(self._launched.items()):
            try:
                exchanged = launched.wait() if isinstance(launched, Job) else launched
                results[group] = (exchanged, exchanged.wait())
            except BaseException as exc:
                error = error or exc
        if error is not None:
            raise error
        return results

    def _write_back(
        self, received: dict[int, tuple[Exchanged[Received], Received]]
    ) -> tuple[int, int | Tensor]:
        """Average every group into its tensors' ``.grad``; (elements, elements sent)."""
        numel = 0
        selected_count: int | Tensor = 0
        sums = []
        for group, layout in enumerate(self._layouts):
            launched, got = received[group]
            like = launched.bucket.gradient
            summed, selected = self.combined(
                launched,
                got,
                **self._buffers.for_combine(group, like, gathered=not self.compressor.allreducible),
            )
            sums.append(summed)
            grads = self._buffers.views(summed, layout.sizes, layout.shapes)
            for param, grad in zip(layout.params, grads, strict=True):
                param.grad = grad
            numel += layout.numel
            selected_count = selected_count + (layout.numel if selected is None else selected)
        # The mean: one batched division for every group, not a launch per group.
        torch._foreach_div_(sums, self.collective.world_size)
        return numel, selected_count

    def _stats(self, numel: int, selected: int | Tensor) -> SyncStats:
        count = self.collective.take_bytes()
        density = self.compressor.density_at(self._epoch)
        return step_stats(
            self._timer.read(),
            bytes_sent=count.payload,
            bytes_wire=count.wire,
            bytes_dense=numel * self._params[0].element_size(),
            density_setup=density,
            density_actual=selected / numel if numel else density,
            error_norm=self.memory_norm(),
            extra=self.extra_metrics(),
        )


def _received(job: Job[Finish | list[Payload]]) -> Received:
    """What ``job`` gave: the gathered payloads, or the sum of the all-reduce it started (the
    job's result, so that waiting for it marks them as used by the waiting stream)."""
    got = job.wait()
    return got() if callable(got) else got


def step_stats(seconds: Mapping[str, Duration], **counts: Any) -> SyncStats:
    """A step's ``SyncStats`` from its timer's spans and its ``counts`` (bytes, densities,
    error norm, ``extra``)."""
    return SyncStats(
        # A compressor waiting for the workers to agree (AGREE) is communicating.
        time_compress=seconds["compress"] - seconds[AGREE],
        time_comm=seconds["comm"] + seconds[AGREE],
        time_update=seconds["update"],
        time_in_backward=seconds["in_backward"],
        time_in_forward=seconds["in_forward"],
        **counts,
    )


def model_order(group: range) -> list[int]:
    """A group's tensors in model order (indices count in backward order): compressors see a
    group's tensors as the model lists them, the output layer's last."""
    return list(reversed(group))
