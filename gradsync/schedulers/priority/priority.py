"""The engine of the priority schedulers (``bytescheduler``, ``usbyte``;
docs/methods/schedulers/bytescheduler.md, "How it works").

The gradient, flattened in backward order (the reverse of ``model.parameters()``), is cut into
partitions by a plan (``Buckets``: partition 0 is on the output side and is ready first; a
subclass makes the plan). Gradient hooks note every tensor's gradient; once each tensor touching
a partition is in, their gradients are copied into the flat buffer (one batched copy), and the
partition is compensated and compressed on the compute thread. The engine's communication thread
all-reduces partitions over a process group of its own: always the ready partition nearest the
input first (the next forward pass needs it first), with at most ``credit`` elements in flight
(a partition larger than the credit goes alone). ``step()`` does not wait: communication goes on
into the next forward pass, where each module waits only for the partitions holding its own
parameters (on CUDA its stream waits for their completion events; on the CPU the host waits),
then steps the optimizer on just those parameters, with the hyperparameters (learning rate, ...)
of the step the gradient belongs to. ``flush()`` waits for the rest and applies it. Every layer
is thus updated before its next use, and training is synchronous data-parallel SGD, however the
communication was ordered.

How the ranks stay in step: every rank must issue the collectives of a process group in the same
order, but when a partition becomes ready differs from rank to rank. Each compressed partition
hands the communication thread one scheduling job, so every rank runs as many, in one FIFO order
with the compressors' own talk. A job first agrees how many leading partitions are ready on
every rank (the MIN of each rank's count, an all-reduce on a second process group, the control
group, so it never queues behind large sends; the round's last job knows the answer, all of
them, since every rank hands it over only after compressing them all), then starts the agreed
partitions in priority order. Credit is counted when a send is issued and comes back when the
oldest send is settled: the communication stream then waits (on the device) for that send to
complete, so every send issued after it starts only once it has, and at most ``credit``
elements are ever in flight on the device, with no host waiting for the device (on the CPU,
settling waits for the send itself). Nothing polls whether a send has finished, so every
decision depends on agreed values alone and all ranks issue the same collectives in the same
order. A failure on the communication thread is raised again in the training thread the next
time that thread waits for it.

Limits: updating some parameters before others equals one step of all of them only for
optimizers that update each parameter on its own (SGD, Adam; not one that couples parameters,
such as a global gradient-norm clip inside the optimizer). A parameter the forward pass uses
outside its own module's forward (not called through that module, as ``nn.MultiheadAttention``
does with ``out_proj``) is updated only when the forward pass ends; if the forward used it,
autograd reports the in-place change at backward. If the communication thread fails on one rank
only, the others wait in their collectives until the runner stops them.
"""

from __future__ import annotations

import collections
import itertools
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar, TypeVar

import torch
from torch import Tensor, nn
from torch.optim import Optimizer
from typing_extensions import Unpack

from gradsync.comm.host_sync import host_sync
from gradsync.schedulers.engine.buckets import Buckets
from gradsync.schedulers.engine.comm_thread import CommThread, Job
from gradsync.schedulers.engine.components import SyncComponents, copy_gradients, mark_stepped
from gradsync.schedulers.engine.engine import EngineParts, step_stats
from gradsync.schedulers.engine.exchange import Bucket, Exchanged, Received
from gradsync.schedulers.engine.hooks import ModelHooks, hook_model
from gradsync.schedulers.engine.residuals import rebucket_residuals
from gradsync.schedulers.engine.step_timer import StepTimer
from gradsync.schedulers.priority.config import AGREEMENT, CREDIT
from gradsync.schedulers.priority.deferred import hyperparameters, using
from gradsync.schedulers.priority.plan import Layout, Plan
from gradsync.schedulers.summing import require_allreducible
from gradsync.types import Collective, GroupInfo, Payload, SyncStats

T = TypeVar("T")
SEND_LOG = 10_000  # sends remembered for ``send_log``


@dataclass
class _Counts:
    """What the communication thread did in one round (kept after the round is let go)."""

    issued: int = 0
    agreements: int = 0


def _not_started() -> Payload:
    raise RuntimeError("a partition's exchange ran before it was started")


@dataclass(frozen=True)
class _Flat:
    """A flat gradient buffer in backward order and each tensor's part of it, shaped as the
    tensor, made once: hooks copy into these views and the update reads them, without a view
    made per tensor per step (a dispatcher call each)."""

    tensor: Tensor
    grads: tuple[Tensor, ...]

    @classmethod
    def like(cls, params: Sequence[nn.Parameter]) -> _Flat:
        first = params[0]
        flat = torch.empty(sum(p.numel() for p in params), dtype=first.dtype, device=first.device)
        parts = flat.split([p.numel() for p in params])
        return cls(flat, tuple(part.view_as(p) for part, p in zip(parts, params, strict=True)))


class _Round:
    """One step's gradient, from its first hook until its last partition is applied."""

    def __init__(self, layout: Layout, flat: _Flat, tensors: int, step: int, epoch: int) -> None:
        count = len(layout.buckets)
        self.layout = layout
        self.flat = flat.tensor
        """The gradient in backward order; a landed partition holds its average in place."""
        self.grads = flat.grads
        """Each tensor's part of ``flat``, shaped as the tensor."""
        self.step, self.epoch = step, epoch
        self.got = [False] * tensors
        self.copied = [False] * tensors
        """Its gradient is in ``flat`` (copied with the first partition holding it)."""
        self.missing = list(layout.tensors_in)
        self.ready = 0
        """Leading partitions compressed on this rank (read by the communication thread)."""
        self.payloads: list[Payload | None] = [None] * count
        """What each partition sends (read by the communication thread once it is handed over)."""
        self.exchanged: list[Exchanged[Received] | None] = [None] * count
        """Each compressed partition's future (``exchange.py``)."""
        self.handed: list[Job[None] | None] = [None] * count
        """The scheduling job each partition's compression handed over (CUDA: its hand-over
        event is when the partition's payload is complete on the compute stream)."""
        self.exchanges: list[Job[Payload]] = [Job(_not_started) for _ in range(count)]
        """Each partition's all-reduce: started and settled by the communication thread."""
        self.counts = _Counts()
        self.landed = [False] * count
        self.applied = [False] * tensors
        self.unapplied = tensors
        self.hyper: list[dict[str, Any]] = []
        # The communication thread's own: agreed ready prefix, sends in flight and their size.
        self.agreed = 0
        self.started = [False] * count
        self.flight: collections.deque[tuple[Job[Payload], int]] = collections.deque()
        self.load = 0


class PrioritySync(SyncComponents):
    """The engine of ``bytescheduler`` and ``usbyte``; a subclass says how the gradient is
    partitioned and in which order partitions go (``_first_plan``, and optionally a plan made
    from measurements)."""

    scheduler_name: ClassVar[str] = "bytescheduler"

    def __init__(self, *, credit: int = CREDIT, **parts: Unpack[EngineParts]) -> None:
        super().__init__(**parts)
        require_allreducible(self.scheduler_name, "partitions", self.compressor)
        if credit < 1:
            raise ValueError(f"scheduler.credit must be >= 1, got {credit}")
        self.credit = credit
        self._params: list[nn.Parameter] = []
        self._sizes: list[int] = []
        self._offsets: list[int] = [0]
        self._optimizer: Optimizer | None = None
        self._comm: CommThread | None = None
        self._timer = StepTimer(torch.device("cpu"))
        self._layout: Layout | None = None
        self._plan_metrics: dict[str, float] = {}
        self._cond = threading.Condition()
        self._error: BaseException | None = None
        self._current: _Round | None = None  # collecting this step's gradient
        self._pending: _Round | None = None  # stepped, some of its updates not applied yet
        self._last: _Counts | None = None
        self._sends: collections.deque[tuple[int, int]] = collections.deque(maxlen=SEND_LOG)
        self._step, self._epoch = 0, 0
        self._timing = False  # subclasses that profile turn on per-tensor backward times
        self._backward_s: list[float] = []
        self._forward_marks = (0.0, 0.0)
        self._last_mark = 0.0
        self._reset_counters()

    # ---- set-up -------------------------------------------------------------------------------
    def attach(self, model: nn.Module, optimizer: Optimizer) -> None:
        params = [p for p in model.parameters() if p.requires_grad][::-1]
        if not params:
            raise ValueError(f"scheduler={self.scheduler_name}: the model has nothing to train")
        first = params[0]
        if any(p.dtype != first.dtype or p.device != first.device for p in params):
            raise ValueError(
                f"scheduler={self.scheduler_name} keeps one flat gradient, so every trainable "
                "parameter needs the same dtype and device"
            )
        self._params, self._optimizer = params, optimizer
        self._sizes = [p.numel() for p in params]
        self._offsets = list(itertools.accumulate(self._sizes, initial=0))
        self._backward_s = [0.0] * len(params)
        self._flats = (_Flat.like(params), _Flat.like(params))
        self._turn = 1
        self._comm, self._timer = self.start_comm(first.device)
        # Two groups: sends on one, the small agreements on the other, so that an agreement
        # never waits behind the sends it is about to schedule.
        self._data: Collective = self.collective.fork()
        self._control: Collective = self.collective.fork()
        index = {id(p): i for i, p in enumerate(params)}
        self._owned: dict[int, list[int]] = {}  # module id: the tensors its pre-hook applies
        self._parent: dict[int, nn.Module] = {}
        self._ran: set[int] | None = set()  # modules seen in the first forward pass
        for module in model.modules():
            # A tied parameter is listed by each of its modules: whichever runs first applies it.
            own = [index[id(p)] for p in module.parameters(recurse=False) if id(p) in index]
            if own:
                self._owned[id(module)] = own
            self._parent.update((id(child), module) for child in module.children())
        hooks = ModelHooks(
            on_gradient=self._on_gradient,
            before_module=self._on_module,
            on_forward_start=self._on_forward_start,
            on_forward_end=self._on_forward_end,
        )
        self._hooked = hook_model(model, params, hooks)
        self._prepare(model)
        self._use_plan(self._first_plan())

    def _on_comm(self, work: Callable[[], T]) -> T:
        """``work`` (collectives outside a step's exchange: timing the link, agreeing on a
        plan) run by the communication thread in its turn, and waited for."""
        assert self._comm is not None, "attach() first"
        return self._comm.submit(work).wait()

    def _prepare(self, model: nn.Module) -> None:
        """Before the first plan: what a subclass measures or installs."""

    def _first_plan(self) -> Plan:
        raise NotImplementedError

    def _use_plan(self, plan: Plan, metrics: Mapping[str, float] | None = None) -> None:
        """Rounds opened from now on use ``plan``; residuals move to its partitions."""
        if plan.buckets.total != sum(self._sizes):
            raise ValueError(
                f"a plan of {plan.buckets.total} elements does not fit a model of "
                f"{sum(self._sizes)}"
            )
        if self._layout is not None and plan.buckets != self._layout.buckets:
            self._rebucket_residuals(self._layout.buckets, plan.buckets)
        self._layout = Layout(plan, [tuple(p.shape) for p in self._params])
        self._plan_metrics = {"sched/partitions": float(len(plan.buckets)), **(metrics or {})}

    def _rebucket_residuals(self, old: Buckets, new: Buckets) -> None:
        rebucket_residuals(self.feedback, old, new, like=self._params[0], name=_name)

    @property
    def plan(self) -> Plan:
        assert self._layout is not None, "attach() first"
        return self._layout.plan

    def exchange_buckets(self) -> Buckets:
        """What each of a step's exchanges carries: the plan's partitions."""
        return self.plan.buckets

    def send_log(self) -> list[tuple[int, int]]:
        """(step, partition) of every send since the last call, in the order issued (the most
        recent ``SEND_LOG``): the same on every rank."""
        with self._cond:
            sends = list(self._sends)
            self._sends.clear()
        return sends

    # ---- the compute thread -------------------------------------------------------------------
    def _reset_counters(self) -> None:
        self._payload_bytes = self._selected = self._late = 0

    def begin(self, *, step: int, epoch: int = 0) -> None:
        self._step, self._epoch = step, epoch
        self._open_round()

    def _open_round(self) -> _Round:
        if self._current is None:
            assert self._layout is not None, "attach() before training"
            # Two buffers take turns: a round is let go once its updates are applied, at the
            # latest when the round after it steps, so at most two are alive. Kept, because
            # a fresh gradient-sized tensor gets fresh pages on a CPU worker.
            self._turn = 1 - self._turn
            flat = self._flats[self._turn]
            self._current = _Round(self._layout, flat, len(self._params), self._step, self._epoch)
        return self._current

    def _on_module(self, module: nn.Module) -> None:
        if self._ran is not None:
            self._ran.add(id(module))
        elif self._pending is None:  # every update applied: nothing to wait for
            return
        own = self._owned.get(id(module))
        if own:
            self._apply_in_forward(own)

    def _adopt_orphans(self) -> None:
        """After the first forward pass: parameters whose module never ran (used by a parent
        directly, as ``nn.MultiheadAttention`` uses its ``out_proj``) are applied by the nearest
        ancestor that did run, before the parent uses them."""
        ran, self._ran = self._ran, None
        assert ran is not None
        for module_id, own in list(self._owned.items()):
            ancestor = self._parent.get(module_id)
            if module_id in ran or ancestor is None:
                continue
            while id(ancestor) not in ran and id(ancestor) in self._parent:
                ancestor = self._parent[id(ancestor)]
            self._owned[id(ancestor)] = [*self._owned.get(id(ancestor), []), *own]
        # A module with nothing to apply needs no hook: any hook sends every call of the
        # module through nn.Module's slower path.
        for module_id, handle in self._hooked.before_module.items():
            if module_id not in self._owned:
                handle.remove()
        self._hooked.before_module = {}

    def _on_forward_start(self) -> None:
        if self._timing:
            self._forward_marks = (self.clock(), self._forward_marks[1])

    def _on_forward_end(self) -> None:
        if self._ran is not None:
            self._adopt_orphans()
        # Parameters whose modules did not run: they must be current before backward.
        pending = self._pending
        if pending is not None:
            late = pending.unapplied
            self._apply_in_forward(range(len(self._params)))
            self._late += late
        if self._timing:  # profiled steps only: this clock waits for the device
            self._last_mark = self.clock()
            self._forward_marks = (self._forward_marks[0], self._last_mark)

    def _on_gradient(self, tensor: int) -> None:
        r = self._open_round()
        if self._timing:  # since the previous hook's own work ended
            self._backward_s[tensor] += self.clock() - self._last_mark
        if r.got[tensor]:
            raise RuntimeError(
                f"scheduler={self.scheduler_name}: a second gradient for one tensor in one step; "
                "it supports one backward pass per step"
            )
        self._mark_ready(r, tensor, in_backward=True)
        if self._timing:
            self._last_mark = self.clock()

    def _mark_ready(self, r: _Round, tensor: int, *, in_backward: bool) -> None:
        r.got[tensor] = True
        for bucket in r.layout.buckets_of[tensor]:
            r.missing[bucket] -= 1
        # Compressed in index order, so compressors that talk do so in the same order everywhere,
        # and every rank hands the communication thread the same jobs in the same order.
        while r.ready < len(r.missing) and r.missing[r.ready] == 0:
            self._copy_in(r, r.ready)
            self._compress(r, r.ready, in_backward=in_backward)

    def _copy_in(self, r: _Round, bucket: int) -> None:
        """The gradients of the tensors in ``bucket`` not copied yet, into the flat buffer in
        one batched copy (not a launch per tensor)."""
        todo = [t for t in r.layout.tensors_of[bucket] if not r.copied[t]]
        if not todo:  # every one reached into an earlier partition
            return
        copy_gradients([self._params[t] for t in todo], [r.grads[t] for t in todo])
        for tensor in todo:
            r.copied[tensor] = True

    def _hand_over(
        self, r: _Round, bucket: Bucket, payload: Payload, ctx: Any
    ) -> Callable[[], Received]:
        """The priority schedulers' ``Send``: one scheduling job per compressed partition,
        which starts the all-reduce once every rank has it ready, in priority order and
        within the credit (``_schedule``); the future is that all-reduce. The payload is not
        kept from reuse on the communication stream: the round holds it until the training
        thread's stream has waited for its all-reduce."""
        assert self._comm is not None
        # Under the lock: a scheduling job counts this partition ready when it runs.
        with self._cond:
            r.payloads[bucket.index] = payload
            r.handed[bucket.index] = self._comm.submit(partial(self._schedule, r, bucket.index))
            r.ready += 1
        return r.exchanges[bucket.index].wait

    def _compress(self, r: _Round, bucket: int, *, in_backward: bool) -> None:
        """Compress partition ``bucket`` and hand it to the communication thread."""
        start = self._timer.mark()
        layout, name = r.layout, _name(bucket)
        part = r.flat[layout.buckets.slice(bucket)]
        info = GroupInfo(
            name=name,
            step=r.step,
            epoch=r.epoch,
            parts=layout.parts[bucket],  # the runs of tensors as laid out in the partition
            model_tensors=len(layout.buckets_of),
        )
        exchanged = self.exchange(Bucket(bucket, part, info), partial(self._hand_over, r))
        r.exchanged[bucket] = exchanged
        payload = exchanged.payload
        selected = self.compressor.selected(payload, exchanged.ctx)
        self._selected += part.numel() if selected is None else selected.numel()
        self._payload_bytes += sum(t.numel() * t.element_size() for t in payload)
        end = self._timer.mark()
        self._timer.add("compress", start, end)
        if in_backward:
            self._timer.add("in_backward", start, end)

    def step(self, *, step: int, epoch: int = 0, loss: Tensor | None = None) -> SyncStats:
        assert self._optimizer is not None and self._layout is not None, "attach() first"
        self._check_comm()
        self._step, self._epoch = step, epoch
        r = self._open_round()
        count = len(r.layout.buckets)
        with self._cond:
            issued_in_backward = r.counts.issued
        for tensor in range(len(self._params)):
            if not r.got[tensor]:  # no gradient this step: it counts as zero
                r.grads[tensor].zero_()
                r.copied[tensor] = True
                self._mark_ready(r, tensor, in_backward=False)
        r.hyper = [hyperparameters(group) for group in self._optimizer.param_groups]
        for param in self._params:
            param.grad = None  # kept in the round; set again per module when it is applied
        # The update is deferred but uses this step's learning rate (kept in r.hyper): tell
        # the LR scheduler the optimizer has been stepped, or it warns that it has skipped one.
        mark_stepped(self._optimizer)
        self._current = None
        if self._pending is not None:  # a forward pass that reached no module
            self._apply(range(len(self._params)))
        self._pending = r
        if self._synchronous():
            self._apply(range(len(self._params)))
        seconds = self._timer.read()
        count_main = self.collective.take_bytes()  # compressors talking while they select
        n = self.collective.world_size
        numel = self._offsets[-1]
        extra = {
            **self._plan_metrics,
            "sched/credit": float(self.credit),
            "sched/sent_in_backward": issued_in_backward / count,
            "sched/late_updates": float(self._late),
        }
        if self._last is not None:
            extra["sched/agreements"] = float(self._last.agreements)
        stats = step_stats(
            seconds,
            bytes_sent=count_main.payload + self._payload_bytes,
            # The sends are ring all-reduces: counted as TorchCollective counts them.
            bytes_wire=count_main.wire + 2 * (n - 1) / n * self._payload_bytes,
            bytes_dense=numel * self._params[0].element_size(),
            density_setup=self.compressor.density_at(self._epoch),
            density_actual=self._selected / numel,
            error_norm=self.memory_norm(),
            extra=extra,
        )
        self._last = r.counts
        self._reset_counters()
        self._after_step(step)
        return stats

    def _synchronous(self) -> bool:
        """True while every update is applied in ``step`` (as a subclass profiles)."""
        return False

    def _after_step(self, step: int) -> None:
        """After ``step`` has handed its gradient over: what a subclass measures or plans."""

    def flush(self) -> None:
        self._apply(range(len(self._params)), timed=False)  # not part of any step's figures
        self._check_comm()  # a failure after the last partition landed is not lost

    def _apply_in_forward(self, tensors: Sequence[int]) -> None:
        r = self._pending
        # Every module's pre-hook comes here: most find their tensors applied already (by the
        # first one's optimizer step), and leave at once, untimed.
        if r is None or all(r.applied[t] for t in tensors):
            return
        with self._timer.span("in_forward"):
            self._apply(tensors)

    def _apply(self, tensors: Iterable[int], *, timed: bool = True) -> None:
        """Wait for the partitions holding ``tensors`` and update those parameters."""
        r = self._pending
        if r is None:
            return
        todo = [t for t in tensors if not r.applied[t]]
        if not todo:
            return
        assert self._optimizer is not None
        start = self._timer.mark()
        for tensor in todo:
            for bucket in r.layout.buckets_of[tensor]:
                if not r.landed[bucket]:
                    self._land(r, bucket)
        landed = self._timer.mark()
        # Others whose partitions are in already go in the same optimizer step (fewer calls);
        # none of them has been used yet in this forward pass, or it would have been applied.
        chosen = set(todo)
        todo += [
            t
            for t in range(len(self._params))
            if not r.applied[t]
            and t not in chosen
            and all(r.landed[b] for b in r.layout.buckets_of[t])
        ]
        params = [self._params[t] for t in todo]
        for tensor, param in zip(todo, params, strict=True):
            param.grad = r.grads[tensor]
        # Only these parameters have a gradient, so the optimizer steps only them.
        with using(self._optimizer, r.hyper):
            self._optimizer.step()
        for param in params:
            param.grad = None
        for tensor in todo:
            r.applied[tensor] = True
        r.unapplied -= len(todo)
        if r.unapplied == 0:
            self._pending = None
        if timed:
            self._timer.add("comm", start, landed)
            self._timer.add("update", landed, self._timer.mark())

    def _land(self, r: _Round, bucket: int) -> None:
        """Wait for one partition's all-reduce (CUDA: this stream waits for its completion
        event; CPU: the host waits) and average it in place."""
        exchanged = r.exchanged[bucket]
        assert exchanged is not None, "a partition lands only once it was compressed"
        try:
            received = exchanged.wait()
        except BaseException as exc:
            raise self._failure(exc) from exc
        summed, _ = self.combined(exchanged, received)
        exchanged.bucket.gradient.copy_(summed).div_(self.collective.world_size)
        r.landed[bucket] = True

    def _check_comm(self) -> None:
        if self._error is not None:
            raise self._failure(self._error) from self._error

    def _failure(self, error: BaseException) -> RuntimeError:
        return RuntimeError(
            f"scheduler={self.scheduler_name}: the communication thread failed: {error!r}"
        )

    # ---- the communication thread -------------------------------------------------------------
    def _schedule(self, r: _Round, bucket: int) -> None:
        """One scheduling job (one per compressed partition, ``bucket`` the one that was):
        agree on what is ready everywhere, start it in priority order within the credit; the
        round's last job waits for the rest."""
        try:
            if self._error is None:
                self._send_agreed(r, bucket)
        except BaseException as exc:  # handed to the training thread, which raises it
            self._error = exc
        if self._error is not None:
            for job in r.exchanges:  # whoever waits for a partition learns of the failure
                if not job.settled:
                    job.settle(None, self._error)

    def _send_agreed(self, r: _Round, bucket: int) -> None:
        count = len(r.layout.buckets)
        if r.agreed < count and bucket == count - 1:
            # Every rank hands this job over only once it has compressed every partition, so
            # the agreement would find all of them ready: every rank knows it without asking.
            with self._cond:  # once the hook that handed it over has recorded it
                r.agreed = r.ready
        elif r.agreed < count:  # once all is agreed, every rank knows it without asking
            r.agreed = self._agree(r)
            with self._cond:
                r.counts.agreements += 1
        sendable = [b for b in range(r.agreed) if not r.started[b]]
        # The highest priority waits for credit; nothing overtakes it.
        for bucket in sorted(sendable, key=r.layout.rank.__getitem__):
            size = r.layout.buckets.numel(bucket)
            while r.flight and r.load + size > self.credit:
                self._complete_oldest(r)
            self._start(r, bucket)
        if all(r.started):  # the round's last sends: each its own completion
            flight, r.flight, r.load = list(r.flight), collections.deque(), 0
            assert self._comm is not None
            for job, _ in flight:
                self._comm.settle_here(job)

    def _agree(self, r: _Round) -> int:
        with self._cond:
            mine = r.ready
        # The MIN over ranks, as the MAX of negatives (``reduce_metrics`` offers sum and max);
        # these few bytes are control traffic, outside the byte counts.
        with host_sync(AGREEMENT):
            agreed = self._control.reduce_metrics([-float(mine)], device=r.flat.device, op="max")
        return int(-agreed[0])

    def _start(self, r: _Round, bucket: int) -> None:
        handed, payload = r.handed[bucket], r.payloads[bucket]
        assert handed is not None and payload is not None
        handed.follow()  # its payload may be newer than this job's hand-over
        job = r.exchanges[bucket]
        job.work = self._data.start_all_reduce(payload)
        r.started[bucket] = True
        r.flight.append((job, r.layout.buckets.numel(bucket)))
        r.load += r.layout.buckets.numel(bucket)
        with self._cond:
            r.counts.issued += 1
            self._sends.append((r.step, bucket))

    def _complete_oldest(self, r: _Round) -> None:
        """Take the oldest send's credit back: settled here, it makes the communication stream
        wait (on the device) for its completion, so the sends issued next start after it."""
        assert self._comm is not None
        job, size = r.flight.popleft()
        self._comm.settle_here(job)
        r.load -= size

    # ---- checkpoints ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        plan = self.plan
        return {
            **self.components_state(),
            "bounds": list(plan.buckets.bounds),
            "order": list(plan.order),
            "plan_metrics": dict(self._plan_metrics),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        # A resumed job keeps the partitions it had, and their residuals.
        metrics = {k: v for k, v in state["plan_metrics"].items() if k != "sched/partitions"}
        self._layout = None  # the saved residuals belong to the saved partitions
        self._use_plan(Plan(Buckets(tuple(state["bounds"])), tuple(state["order"])), metrics)
        self.load_components_state(state)


def _name(bucket: int) -> str:
    return f"part{bucket}"
