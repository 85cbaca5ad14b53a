"""``scheduler=bytescheduler``: ByteScheduler's priority, credit-based scheduling (SPECS §7.5).

The gradient, flattened in backward order (the reverse of ``model.parameters()``), is cut into
partitions of ``partition_size`` elements (``Buckets``: partition 0 is on the output side and is
ready first). Gradient hooks copy every tensor's gradient into the flat buffer; once each tensor
touching a partition is in, the partition is compensated and compressed on the compute thread.
A communication thread all-reduces partitions over a process group of its own: always the ready
partition nearest the input first (the next forward pass needs it first), with at most ``credit``
elements in flight (a partition larger than the credit goes alone). ``step()`` does not wait:
communication goes on into the next forward pass, where each module waits only for the
partitions holding its own parameters, then steps the optimizer on just those parameters, with
the hyperparameters (learning rate, ...) of the step the gradient belongs to. ``flush()`` waits
for the rest and applies it. Every layer is thus updated before its next use, and training is
synchronous data-parallel SGD, however the communication was ordered.

How the ranks stay in step: every rank must issue the collectives of a process group in the same
order, but when a partition becomes ready differs from rank to rank. A rank's readiness is kept
as a prefix (how many leading partitions it has compressed). Before each decision the
communication thread takes the MIN of that count over the ranks, with an all-reduce on a second
process group (the control group, so that it never queues behind large sends), and chooses only
among the agreed partitions. Credit is freed only by waiting for the oldest send, never by
polling whether a send has finished, so every decision depends on agreed values alone and all
ranks issue the same collectives in the same order. A failure on the communication thread is
raised again in the training thread the next time that thread waits for it.

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
import contextlib
import itertools
import logging
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from torch.optim import Optimizer

from gradsync.schedulers.engine.buckets import Buckets
from gradsync.schedulers.engine.components import SyncComponents, mark_stepped
from gradsync.schedulers.engine.group_info import bucket_parts
from gradsync.schedulers.priority.config import CREDIT, PARTITION_SIZE
from gradsync.schedulers.registry import require_allreducible
from gradsync.types import Collective, GroupInfo, Payload, SyncStats

log = logging.getLogger("gradsync")

POLL_S = 0.05  # a waiting thread checks this often that the other one is still alive
SEND_LOG = 10_000  # sends remembered for ``send_log``


@dataclass(frozen=True)
class Plan:
    """The partitions of the backward-ordered flat gradient and the order they are sent in."""

    buckets: Buckets
    order: tuple[int, ...]
    """Partition indices, the highest priority first."""

    def __post_init__(self) -> None:
        if sorted(self.order) != list(range(len(self.buckets))):
            raise ValueError("a plan's order must list every partition once")


def input_first(buckets: Buckets) -> Plan:
    """ByteScheduler's priority: the partition nearest the input (the last one) first."""
    return Plan(buckets, tuple(reversed(range(len(buckets)))))


class _Layout:
    """What the hooks need to know about a plan, computed once per plan."""

    def __init__(self, plan: Plan, shapes: Sequence[tuple[int, ...]]) -> None:
        self.plan = plan
        self.buckets = plan.buckets
        count = len(plan.buckets)
        self.rank = [0] * count  # position of each partition in the send order
        for position, bucket in enumerate(plan.order):
            self.rank[bucket] = position
        # The flat gradient is in backward order: tensor t is the model's (last - t).
        model_index = range(len(shapes) - 1, -1, -1)
        self.parts = bucket_parts(plan.buckets, shapes, model_index)
        self.buckets_of: list[list[int]] = [[] for _ in shapes]
        for bucket, parts in enumerate(self.parts):
            for part in parts:
                self.buckets_of[len(shapes) - 1 - part.index].append(bucket)
        self.tensors_in = [len(p) for p in self.parts]


@dataclass
class _Counts:
    """What the communication thread did in one round (kept after the round is let go)."""

    issued: int = 0
    agreements: int = 0


class _Round:
    """One step's gradient, from its first hook until its last partition is applied."""

    def __init__(self, layout: _Layout, flat: Tensor, tensors: int, step: int, epoch: int) -> None:
        count = len(layout.buckets)
        self.layout = layout
        self.flat = flat
        """The gradient in backward order; a landed partition holds its average in place."""
        self.step, self.epoch = step, epoch
        self.got = [False] * tensors
        self.missing = list(layout.tensors_in)
        self.ready = 0
        """Leading partitions compressed on this rank (shared with the communication thread)."""
        self.payloads: list[Payload | None] = [None] * count
        self.ctxs: list[Any] = [None] * count
        self.issued: list[Callable[[], Payload] | None] = [None] * count
        self.counts = _Counts()
        self.landed = [False] * count
        self.applied = [False] * tensors
        self.unapplied = tensors
        self.hyper: list[dict[str, Any]] = []


class PrioritySync(SyncComponents):
    """The engine of ``bytescheduler`` and ``usbyte``; a subclass says how the gradient is
    partitioned and in which order partitions go (``_first_plan``, and optionally a plan made
    from measurements)."""

    scheduler_name: ClassVar[str] = "bytescheduler"

    def __init__(self, *, credit: int = CREDIT, **components: Any) -> None:
        super().__init__(**components)
        require_allreducible(self.scheduler_name, "partitions", self.compressor)
        if credit < 1:
            raise ValueError(f"scheduler.credit must be >= 1, got {credit}")
        self.credit = credit
        self._params: list[nn.Parameter] = []
        self._sizes: list[int] = []
        self._offsets: list[int] = [0]
        self._optimizer: Optimizer | None = None
        self._layout: _Layout | None = None
        self._plan_metrics: dict[str, float] = {}
        self._cond = threading.Condition()
        self._rounds: queue.Queue[_Round | None] = queue.Queue()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
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
        # Two groups: sends on one, the small agreements on the other, so that an agreement
        # never waits behind the sends it is about to schedule.
        self._data: Collective = self.collective.fork()
        self._control: Collective = self.collective.fork()
        index = {id(p): i for i, p in enumerate(params)}
        for i, param in enumerate(params):
            param.register_post_accumulate_grad_hook(lambda _, i=i: self._on_gradient(i))
        self._owned: dict[int, list[int]] = {}  # module id: the tensors its pre-hook applies
        self._parent: dict[int, nn.Module] = {}
        self._ran: set[int] | None = set()  # modules seen in the first forward pass
        for module in model.modules():
            # A tied parameter is listed by each of its modules: whichever runs first applies it.
            own = [index[id(p)] for p in module.parameters(recurse=False) if id(p) in index]
            if own:
                self._owned[id(module)] = own
            self._parent.update((id(child), module) for child in module.children())
            module.register_forward_pre_hook(lambda module, _: self._on_module(module))
        model.register_forward_pre_hook(lambda *_: self._on_forward_start())
        model.register_forward_hook(lambda *_: self._on_forward_end())
        self._prepare(model)
        self._use_plan(self._first_plan())
        self._thread = threading.Thread(
            target=self._run, name=f"gradsync-{self.scheduler_name}", daemon=True
        )
        self._thread.start()

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
        self._layout = _Layout(plan, [tuple(p.shape) for p in self._params])
        self._plan_metrics = {"sched/partitions": float(len(plan.buckets)), **(metrics or {})}

    def _rebucket_residuals(self, old: Buckets, new: Buckets) -> None:
        state = self.feedback.state_dict()
        if not state:
            return
        like = self._params[0]
        flat = torch.cat(
            [
                state.get(_name(b), torch.zeros(old.numel(b), dtype=like.dtype)).reshape(-1)
                for b in range(len(old))
            ]
        )
        self.feedback.load_state_dict({_name(b): flat[new.slice(b)] for b in range(len(new))})

    @property
    def plan(self) -> Plan:
        assert self._layout is not None, "attach() first"
        return self._layout.plan

    def send_log(self) -> list[tuple[int, int]]:
        """(step, partition) of every send since the last call, in the order issued (the most
        recent ``SEND_LOG``): the same on every rank."""
        with self._cond:
            sends = list(self._sends)
            self._sends.clear()
        return sends

    # ---- the compute thread -------------------------------------------------------------------
    def _reset_counters(self) -> None:
        self._compress_s = self._in_backward_s = 0.0
        self._waited_s = self._update_s = self._in_forward_s = 0.0
        self._payload_bytes = self._selected = self._late = 0

    def begin(self, *, step: int, epoch: int = 0) -> None:
        self._step, self._epoch = step, epoch
        self._open_round()

    def _open_round(self) -> _Round:
        if self._current is None:
            assert self._layout is not None, "attach() before training"
            like = self._params[0]
            flat = torch.empty(self._offsets[-1], dtype=like.dtype, device=like.device)
            self._current = _Round(self._layout, flat, len(self._params), self._step, self._epoch)
            self._rounds.put(self._current)
        return self._current

    def _on_module(self, module: nn.Module) -> None:
        if self._ran is not None:
            self._ran.add(id(module))
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

    def _on_forward_start(self) -> None:
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
        grad = self._params[tensor].grad
        target = r.flat[self._offsets[tensor] : self._offsets[tensor + 1]]
        if grad is None:
            target.zero_()
        else:
            target.copy_(grad.reshape(-1))
        self._mark_ready(r, tensor, in_backward=True)
        self._last_mark = self.clock()

    def _mark_ready(self, r: _Round, tensor: int, *, in_backward: bool) -> None:
        r.got[tensor] = True
        for bucket in r.layout.buckets_of[tensor]:
            r.missing[bucket] -= 1
        # Compressed in index order, so compressors that talk do so in the same order everywhere.
        while r.ready < len(r.missing) and r.missing[r.ready] == 0:
            self._compress(r, r.ready, in_backward=in_backward)
            with self._cond:
                r.ready += 1
                self._cond.notify_all()

    def _compress(self, r: _Round, bucket: int, *, in_backward: bool) -> None:
        start = self.clock()
        layout, name = r.layout, _name(bucket)
        part = r.flat[layout.buckets.slice(bucket)]
        info = GroupInfo(
            name=name,
            step=r.step,
            epoch=r.epoch,
            parts=layout.parts[bucket],  # the runs of tensors as laid out in the partition
            model_tensors=len(layout.buckets_of),
        )
        payload, ctx = self.compress_with_feedback(part, group=info)
        r.payloads[bucket], r.ctxs[bucket] = payload, ctx
        selected = self.compressor.selected(payload, ctx)
        self._selected += part.numel() if selected is None else selected.numel()
        self._payload_bytes += sum(t.numel() * t.element_size() for t in payload)
        seconds = self.clock() - start
        self._compress_s += seconds
        if in_backward:
            self._in_backward_s += seconds

    def step(self, *, step: int, epoch: int = 0, loss: Tensor | None = None) -> SyncStats:
        assert self._optimizer is not None and self._layout is not None, "attach() first"
        self._check_thread()
        self._step, self._epoch = step, epoch
        r = self._open_round()
        count = len(r.layout.buckets)
        with self._cond:
            issued_in_backward = r.counts.issued
        for tensor in range(len(self._params)):
            if not r.got[tensor]:  # no gradient this step: it counts as zero
                r.flat[self._offsets[tensor] : self._offsets[tensor + 1]].zero_()
                self._mark_ready(r, tensor, in_backward=False)
        r.hyper = [_hyperparameters(group) for group in self._optimizer.param_groups]
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
        agreeing = self.collective.busy_seconds()  # compressors talking while they select
        count_main = self.collective.take_bytes()
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
        stats = SyncStats(
            bytes_sent=count_main.payload + self._payload_bytes,
            # The sends are ring all-reduces: counted as TorchCollective counts them.
            bytes_wire=count_main.wire + 2 * (n - 1) / n * self._payload_bytes,
            bytes_dense=numel * self._params[0].element_size(),
            density_setup=self.compressor.density,
            density_actual=self._selected / numel,
            error_norm=self.feedback.norm(),
            time_compress=self._compress_s - agreeing,
            time_comm=self._waited_s + agreeing,
            time_update=self._update_s,
            time_in_backward=self._in_backward_s,
            time_in_forward=self._in_forward_s,
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
        if self._pending is None:
            return
        kept = (self._waited_s, self._update_s)  # not part of any step's figures
        self._apply(range(len(self._params)))
        self._waited_s, self._update_s = kept

    def _apply_in_forward(self, tensors: Iterable[int]) -> None:
        start = self.clock()
        self._apply(tensors)
        self._in_forward_s += self.clock() - start

    def _apply(self, tensors: Iterable[int]) -> None:
        """Wait for the partitions holding ``tensors`` and update those parameters."""
        r = self._pending
        if r is None:
            return
        todo = [t for t in tensors if not r.applied[t]]
        if not todo:
            return
        assert self._optimizer is not None
        start = self.clock()
        for tensor in todo:
            for bucket in r.layout.buckets_of[tensor]:
                if not r.landed[bucket]:
                    self._land(r, bucket)
        landed = self.clock()
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
            average = r.flat[self._offsets[tensor] : self._offsets[tensor + 1]]
            param.grad = average.view_as(param)
        # Only these parameters have a gradient, so the optimizer steps only them.
        with _using(self._optimizer, r.hyper):
            self._optimizer.step()
        for param in params:
            param.grad = None
        for tensor in todo:
            r.applied[tensor] = True
        r.unapplied -= len(todo)
        if r.unapplied == 0:
            self._pending = None
        self._waited_s += landed - start
        self._update_s += self.clock() - landed

    def _land(self, r: _Round, bucket: int) -> None:
        """Wait for one partition's all-reduce and average it in place."""
        with self._cond:
            while (finish := r.issued[bucket]) is None:
                self._check_thread()
                self._cond.wait(POLL_S)
        received = finish()
        summed = self.compressor.decompress(received, r.ctxs[bucket])
        r.flat[r.layout.buckets.slice(bucket)].copy_(summed).div_(self.collective.world_size)
        r.landed[bucket] = True

    def _check_thread(self) -> None:
        if self._error is not None:
            raise RuntimeError(
                f"scheduler={self.scheduler_name}: the communication thread failed: {self._error!r}"
            ) from self._error
        if self._thread is not None and not self._thread.is_alive():
            raise RuntimeError(f"scheduler={self.scheduler_name}: the communication thread ended")

    # ---- the communication thread -------------------------------------------------------------
    def _run(self) -> None:
        try:
            while (r := self._rounds.get()) is not None:
                self._communicate(r)
        except BaseException as exc:  # handed to the training thread, which raises it
            with self._cond:
                self._error = exc
                self._cond.notify_all()

    def _communicate(self, r: _Round) -> None:
        """Every partition of one round, each sent once, in an order all ranks agree on."""
        buckets, rank = r.layout.buckets, r.layout.rank
        count = len(buckets)
        agreed = sent = 0
        issued = [False] * count
        flight: collections.deque[tuple[Callable[[], Payload], int]] = collections.deque()
        load = 0
        while sent < count:
            sendable = [b for b in range(agreed) if not issued[b]]
            if agreed < count:  # one agreement per pass, on every rank alike
                if not sendable:
                    self._wait_ready(r, agreed)
                agreed = self._agree(r)
                r.counts.agreements += 1
                sendable = [b for b in range(agreed) if not issued[b]]
            sendable.sort(key=rank.__getitem__)
            blocked = False
            for bucket in sendable:
                size = buckets.numel(bucket)
                if flight and load + size > self.credit:
                    blocked = True  # the highest priority waits for credit; nothing overtakes
                    break
                payload = r.payloads[bucket]
                assert payload is not None
                finish = self._data.start_all_reduce(payload)
                flight.append((finish, size))
                load += size
                issued[bucket] = True
                sent += 1
                with self._cond:
                    r.issued[bucket] = finish
                    r.counts.issued += 1
                    self._sends.append((r.step, bucket))
                    self._cond.notify_all()
            if blocked:
                finish, size = flight.popleft()
                finish()
                load -= size
        while flight:
            flight.popleft()[0]()

    def _wait_ready(self, r: _Round, agreed: int) -> None:
        """Until this rank has more ready than was agreed (sleeping, not spinning)."""
        with self._cond:
            while r.ready <= agreed:
                self._cond.wait(POLL_S)

    def _agree(self, r: _Round) -> int:
        with self._cond:
            mine = r.ready
        # The MIN over ranks, as the MAX of negatives (``reduce_metrics`` offers sum and max);
        # these few bytes are control traffic, outside the byte counts.
        agreed = self._control.reduce_metrics([-float(mine)], device=r.flat.device, op="max")
        return int(-agreed[0])

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


class ByteSchedulerSync(PrioritySync):
    def __init__(
        self, *, partition_size: int = PARTITION_SIZE, credit: int = CREDIT, **components: Any
    ) -> None:
        if partition_size < 1:
            raise ValueError(f"scheduler.partition_size must be >= 1, got {partition_size}")
        super().__init__(credit=credit, **components)
        self.partition_size = partition_size

    def _first_plan(self) -> Plan:
        return input_first(Buckets.partition(self._sizes, self.partition_size))


def _name(bucket: int) -> str:
    return f"part{bucket}"


def _hyperparameters(group: Mapping[str, Any]) -> dict[str, Any]:
    """A parameter group's settings now (a tensor learning rate copied, not shared)."""
    return {k: v.clone() if isinstance(v, Tensor) else v for k, v in group.items() if k != "params"}


@contextlib.contextmanager
def _using(optimizer: Optimizer, hyper: Sequence[Mapping[str, Any]]) -> Iterator[None]:
    """The optimizer with the settings of an earlier step (the LR scheduler has moved on)."""
    groups = optimizer.param_groups
    now = [{k: group[k] for k in saved} for group, saved in zip(groups, hyper, strict=True)]
    for group, saved in zip(groups, hyper, strict=True):
        group.update(saved)
    try:
        yield
    finally:
        for group, current in zip(groups, now, strict=True):
            group.update(current)
