"""The interfaces every component implements and the values they share."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch
from torch import Tensor, nn
from torch.optim import Optimizer

from gradsync.durations import Duration

Payload = tuple[Tensor, ...]
"""The only thing that goes on the wire. A compressor's context stays on its worker."""


@dataclass(frozen=True)
class TensorPart:
    """One of the model's tensors, or the run of its elements that falls in a group (a bucket
    cut by element ranges, not at tensor boundaries)."""

    index: int
    """Position among the model's trainable tensors, in model order."""
    shape: tuple[int, ...]
    """The whole tensor's shape."""
    start: int = 0
    """First element of the run, in the tensor's flattened (row-major) order."""
    stop: int | None = None
    """End of the run (exclusive); None: the tensor's end."""

    @property
    def numel(self) -> int:
        return (math.prod(self.shape) if self.stop is None else self.stop) - self.start

    @property
    def whole(self) -> bool:
        return self.start == 0 and (self.stop is None or self.stop == math.prod(self.shape))


@dataclass(frozen=True)
class GroupInfo:
    """What a compressor is told about the flat group of gradients it compresses."""

    name: str
    """The group's name; a compressor's per-group state and draws are keyed by it."""
    step: int
    """Optimizer step."""
    epoch: int = 0
    parts: tuple[TensorPart, ...] = ()
    """The tensors (or runs of them) the group is made of, in the order of its flat gradient;
    empty: the group is one tensor with no known place in the model."""
    model_tensors: int = 0
    """How many trainable tensors the model has (0: unknown)."""
    ready: tuple[int, ...] = ()
    """The group's parts (positions in ``parts``) in the order their gradients became ready in
    the job's first backward pass, as DDP orders a bucket once it has rebuilt it after its first
    step; empty: unknown (taken as backward order, the reverse of ``parts``)."""

    @classmethod
    def of_sizes(
        cls, name: str, step: int, sizes: Sequence[int] | None = None, *, epoch: int = 0
    ) -> GroupInfo:
        """A whole model's flat gradient known only by its tensors' element counts (each taken
        as a 1-d tensor), in model order; None: a single tensor."""
        parts = tuple(TensorPart(index, (size,)) for index, size in enumerate(sizes or ()))
        return cls(name, step, epoch, parts, model_tensors=len(parts))

    @property
    def sizes(self) -> list[int] | None:
        """Element counts of the group's parts; None: the group is one tensor."""
        return [part.numel for part in self.parts] if self.parts else None

    @property
    def shapes(self) -> list[tuple[int, ...]] | None:
        """Shapes of the group's tensors when it is made of whole tensors; None otherwise."""
        if not self.parts or not all(part.whole for part in self.parts):
            return None
        return [part.shape for part in self.parts]

    @property
    def tensors_after(self) -> int:
        """How many of the model's tensors come after the group's last one (0 when unknown)."""
        if not self.parts or not self.model_tensors:
            return 0
        return self.model_tensors - 1 - max(part.index for part in self.parts)


@runtime_checkable
class Compressor(Protocol):
    allreducible: bool
    """Payloads of all workers can be summed elementwise on the wire (same layout everywhere)."""
    lossless: bool
    """decompress(compress(g)) == g exactly, so error feedback has nothing to keep."""
    density: float
    """Fraction of elements a worker selects (1.0 for dense methods), once any density warm-up
    is over."""
    error_feedback: bool
    """The method as published keeps an error-feedback residual (``feedback=auto`` follows it)."""
    payload_same_shape: bool
    """Every worker's payload has the shapes of this one's, known from the group alone (a fixed
    k, codes packed from the group's sizes, an agreed index set), so gathering payloads needs
    no exchange of lengths (``Collective.all_gather(same_shape=True)``)."""
    selects_alone: bool
    """One worker selects while the others wait for its answer (CLT-k's leader), so on a host
    the workers share, its selection has the cores to itself (``gradsync simulate``)."""
    steady_step: int
    """The first step from which it compresses as configured (PowerSGD sends its first
    ``start_step`` steps dense); ``gradsync simulate`` measures it there."""
    sends_selected_values: bool
    """``decompress(compress(g))`` is g itself at ``selected``'s indices and 0 elsewhere (a
    sparsifier sending g's own values), so error feedback keeps g with those indices zeroed and
    needs no dense decompressed copy (``ErrorFeedback.forget_sent``)."""
    host_syncs: ClassVar[Mapping[str, str]]
    """Where the method decides on the host, so a GPU worker waits for its device: each point
    its ``compress`` (or the exchange of its payloads) may pass through ``host_sync`` (named
    ``<compressor>.<what>``, or a collective's own, such as ``all_gather.lengths``), with why.
    Points reached only with several workers or with some options are declared too; empty for a
    compressor that never waits (``gradsync/comm/host_sync.py``)."""

    def density_at(self, epoch: int) -> float:
        """The fraction it selects in ``epoch``: ``density``, or more during a warm-up
        (``compressor.warmup_epochs``); ``comm/density_setup`` logs it."""
        ...

    def bind(self, collective: Collective) -> None:
        """Give the compressor the workers' collective. Sparsifiers that must agree on an index
        set (union top-k, CLT-k, DEFT) talk through it inside ``compress``; others ignore it."""
        ...

    def compress(self, grad: Tensor, *, group: GroupInfo) -> tuple[Payload, Any]:
        """``grad`` is one flat group of gradients, described by ``group`` (its parts' element
        counts add up to ``grad.numel()``). Returns what goes on the wire and a context that
        stays on this worker."""
        ...

    def decompress(self, payload: Payload, ctx: Any, out: Tensor | None = None) -> Tensor:
        """The gradient ``payload`` stands for (a sum of payloads, when they add up).
        ``out``: a tensor of the gradient's shape the result may be written into, its values
        overwritten, to spare allocating one; the result is returned either way."""
        ...

    def selected(self, payload: Payload, ctx: Any) -> Tensor | None:
        """Indices whose values this payload carries; None when it carries every element."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """What the compressor keeps across steps, for checkpoints only (never taken while
        training; read back on the host); empty when it keeps nothing."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...

    def snapshot(self) -> object:
        """What it keeps now, copied where it lives (never through the host), for ``restore``:
        an fp16 step that every worker skips gives it back. None when it keeps nothing."""
        ...

    def restore(self, snapshot: object) -> None: ...


@runtime_checkable
class OwnMemory(Protocol):
    """A compressor that keeps its own error memory (DGC's unsent velocity; PowerSGD's, which
    needs what the exchange returned, never seen by the shared ``ErrorFeedback``): the logged
    error norm is this memory's. (Its schema refuses ``feedback=residual``:
    ``CompressorConfig.keeps_own_residual``.)"""

    def memory_norm(self) -> Tensor:
        """L2 norm of the memory on this worker, a 0-d tensor (read when metrics are logged)."""
        ...


@runtime_checkable
class ErrorFeedback(Protocol):
    remembers: bool
    """It keeps what the compressor left out (``update``/``forget_sent`` do something)."""

    def compensate(self, grad: Tensor, *, name: str, in_place: bool = False) -> Tensor:
        """``grad`` plus what earlier steps left out; ``in_place``: ``grad`` is the caller's
        scratch, written into rather than copied."""
        ...

    def update(self, compensated: Tensor, transmitted: Tensor, *, name: str) -> None: ...

    def forget_sent(self, compensated: Tensor, sent: Tensor, *, name: str) -> None:
        """``update`` for a compressor that sent ``compensated``'s own values at the indices
        ``sent`` and nothing else (``Compressor.sends_selected_values``)."""
        ...

    def norm(self) -> Tensor:
        """L2 norm of all residual memory on this worker: a 0-d tensor where the residuals
        live, read when metrics are logged (no host sync per step)."""
        ...

    def state_dict(self) -> dict[str, Tensor]:
        """The memory for a checkpoint, on the host (never taken while training)."""
        ...

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None: ...

    def residuals(self) -> dict[str, Tensor]:
        """The memory by name as it is now, where it lives, without a copy: what a scheduler
        that changes its groups cuts anew (``replace_residuals``) on the device."""
        ...

    def replace_residuals(self, residuals: Mapping[str, Tensor]) -> None: ...

    def snapshot(self) -> object:
        """The memory as it is now, kept where it lives and without a copy, for ``restore``
        (an fp16 step every worker skips gives its residuals back)."""
        ...

    def restore(self, snapshot: object) -> None: ...


class Collective(Protocol):
    rank: int
    world_size: int

    def barrier(self) -> None:
        """Wait until every worker of this group gets here."""
        ...

    def fork(self, *, interface: str | None = None) -> Collective:
        """The same workers over a process group of their own (for another thread); with
        ``interface``, one that talks over that network interface (a second link)."""
        ...

    def all_reduce(self, payload: Payload, *, op: str = "sum") -> Payload:
        """Elementwise ``op`` ("sum" or "max") over workers, in place."""
        ...

    def start_all_reduce(self, payload: Payload, *, op: str = "sum") -> Callable[[], Payload]:
        """``all_reduce`` without waiting: the returned function waits and gives the result."""
        ...

    def all_gather(self, payload: Payload, *, same_shape: bool = False) -> list[Payload]:
        """Every worker's payload, in rank order. Its tensors may differ in length (first
        dimension) between workers, unless the caller says ``same_shape``: then every worker
        must send the shapes of this one's, and no lengths are exchanged first."""
        ...

    def broadcast(self, payload: Payload, *, src: int) -> Payload: ...

    def world(self) -> Collective:
        """Every rank of the job, parameter servers included, for point-to-point with them."""
        ...

    def send(self, payload: Payload, *, dst: int, tag: int = 0) -> None:
        """Send the payload's tensors, in order, to rank ``dst`` of this group; counted as
        this worker's bytes once each."""
        ...

    def start_send(self, payload: Payload, *, dst: int, tag: int = 0) -> Callable[[], None]:
        """``send`` without waiting: the returned function waits until it is sent."""
        ...

    def recv(self, payload: Payload, *, src: int | None = None, tag: int = 0) -> int:
        """Fill the payload's tensors, in order, from rank ``src`` (None: whichever rank sends
        first); the sender's rank. The sender counts the bytes."""
        ...

    def start_recv(self, payload: Payload, *, src: int, tag: int = 0) -> Callable[[], Payload]:
        """``recv`` from ``src`` without waiting: the returned function waits and gives it."""
        ...

    def take_bytes(self) -> Any:
        """Bytes moved since the last call (``.payload``, ``.wire``); resets the count. Safe to
        call while another thread's collectives are adding to it."""
        ...

    def reduce_metrics(
        self, values: Sequence[float], *, device: torch.device, op: str = "sum"
    ) -> list[float]:
        """Sum (or ``op="max"``) scalars over workers for logging, outside the byte count."""
        ...


Metric = float | Tensor
"""A logged value: a float, or a 0-d tensor left on its device until the loop logs it (every
``log_every`` steps), so that a step needs no host sync for its metrics."""


@dataclass
class SyncStats:
    """What one synchronization step did, in the units of the metric glossary."""

    bytes_sent: int
    bytes_wire: float
    bytes_dense: int
    """What this worker would have sent uncompressed: the gradient at its own precision."""
    density_setup: float
    density_actual: Metric
    error_norm: Metric
    time_compress: Duration
    time_comm: Duration
    time_update: Duration
    time_in_backward: Duration = 0.0
    """Part of ``time_compress`` spent inside backward (compression in gradient hooks): the
    loop takes it out of ``time/backward`` so the parts of an iteration add up."""
    time_in_forward: Duration = 0.0
    """Part of ``time_compress``, ``time_comm`` and ``time_update`` spent inside the forward
    pass (sends started as it begins; waiting for and applying each layer's update as its
    forward begins): the loop takes it out of ``time/forward``."""
    extra: Mapping[str, Duration] = field(default_factory=dict)
    """A strategy's own metrics, logged as they are named (``sched/groups``, ...)."""


class SyncModel(Protocol):
    """Owns the exchange of gradients and the parameter update for one strategy."""

    workers_in_lockstep: bool
    """Every step involves every worker. False (asynchronous parameter servers): logged metrics
    are this worker's own, since reducing them over workers would make them wait for each
    other."""

    def attach(self, model: nn.Module, optimizer: Optimizer) -> None: ...

    def begin(self, *, step: int, epoch: int = 0) -> None:
        """Before the forward pass of ``step``: what the gradient hooks of this step will need."""
        ...

    def step(self, *, step: int, epoch: int = 0, loss: Tensor | None = None) -> SyncStats:
        """Exchange this step's gradient and update (or not); ``loss`` is the step's training
        loss, for schedulers that model convergence (DeFT's Preserver)."""
        ...

    def flush(self) -> None:
        """Finish what ``step`` left in flight (updates a scheduler applies during the next
        forward pass), before the model is evaluated or saved."""
        ...

    def metrics_collective(self) -> Collective:
        """The collective the loop reduces its logged metrics over: in the scheduler's own
        order of collectives (through its communication thread), never beside it."""
        ...

    def close(self) -> None:
        """Release what ``attach`` started (the communication thread), after ``flush``."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


class MetricsLogger(Protocol):
    def log(self, metrics: Mapping[str, float], *, step: int) -> None: ...

    def close(self) -> None: ...
