"""What a compressor puts on the wire, measured rather than described: the real compressor runs
on the profiled gradient against a collective that only records each call's kind and bytes.
One place knows every method's format (its own code), and the cost model prices the calls.

The recording collective stands for ``world`` workers that select as many elements as this one
but elsewhere (its index sets shifted round the gradient): index sets that grow with the
workers (union top-k's build-up) grow as they would for independent selections, the most they
can. Beyond ``MAX_RECORDED_WORLD`` workers each call's bytes follow the power law of its growth
from half that world to that world, capped at the dense gradient.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from gradsync.comm.solo import SoloCollective
from gradsync.projection.estimates import LENGTHS, Wire
from gradsync.schedulers.engine.combine import combine
from gradsync.schedulers.engine.components import SyncComponents
from gradsync.schedulers.engine.group_buffers import GroupBuffers
from gradsync.schedulers.engine.profiling import samples_within
from gradsync.types import GroupInfo, TensorPart

if TYPE_CHECKING:
    from torch import Tensor

    from gradsync.types import Compressor, ErrorFeedback, Payload

REPEATS, MAX_REPEATS = 3, 25
MEASURE_S = 1.0
# More than a last-level cache: a step's compression follows backward, which has swept the
# caches of what the compressor reads; measured warm, selections ran 10-40% faster.
CACHE_SWEEP_BYTES = 64 * 2**20
MAX_RECORDED_WORLD = 8  # larger worlds are extrapolated (every worker's payload is built here)
INDEX_DTYPES = (torch.int32, torch.int64)


class RecordingCollective(SoloCollective):
    """A world of ``world`` workers seen from rank 0: every call records (kind, bytes this
    worker sends), one per tensor of the payload, as the real collective runs them
    (``comm/collective.py``). The others' payloads are this worker's, with index tensors
    shifted by their rank's share of ``domain`` (the gradient's elements)."""

    def __init__(self, world: int, domain: int) -> None:
        self.world_size = world
        self.domain = domain
        self.calls: list[tuple[str, int]] = []

    def record(self, kind: str, payload: Payload) -> None:
        self.calls += [(kind, t.numel() * t.element_size()) for t in payload]

    def all_reduce(self, payload: Payload, *, op: str = "sum") -> Payload:
        self.record("all_reduce", payload)
        return payload

    def start_all_reduce(self, payload: Payload, *, op: str = "sum") -> Callable[[], Payload]:
        self.record("all_reduce", payload)
        return lambda: payload

    def all_gather(self, payload: Payload, *, same_shape: bool = False) -> list[Payload]:
        if not same_shape:
            self.calls.append((LENGTHS, 0))
        self.record("all_gather", payload)
        return [tuple(self._elsewhere(t, rank) for t in payload) for rank in range(self.world_size)]

    def broadcast(self, payload: Payload, *, src: int) -> Payload:
        self.record("broadcast", payload)
        return payload

    def _elsewhere(self, tensor: Tensor, rank: int) -> Tensor:
        if rank == 0 or tensor.dtype not in INDEX_DTYPES or self.domain < 1:
            return tensor
        shift = rank * self.domain // self.world_size
        return (tensor.long() + shift).remainder_(self.domain).to(tensor.dtype)


STEADY_EPOCH = 2**31 - 1
"""The epoch the compressors are measured in: past any density warm-up
(``compressor.warmup_epochs``), as the projected run spends nearly all its steps."""


def measure_wire(
    name: str,
    compressor: Compressor,
    feedback: ErrorFeedback,
    gradient: Tensor,
    layer_shapes: Sequence[tuple[int, ...]],
    *,
    workers: int = 2,
) -> Wire:
    """Run ``compressor`` with its error feedback on ``gradient`` (one flat group of
    ``layer_shapes`` tensors), as the schedulers do (``SyncComponents.compress_with_feedback``),
    recording its collectives among ``workers``, then combine what they all sent; REPEATS
    times each (more for a fast compressor) for a median time."""

    collective = RecordingCollective(workers, gradient.numel())
    components = SyncComponents(
        compressor=compressor, feedback=feedback, collective=collective, clock=time.perf_counter
    )
    fresh = feedback.state_dict()
    buffers = GroupBuffers()  # kept from step to step, as the engine keeps them
    # Where the compressor runs as configured: past any density warm-up, and past PowerSGD's
    # dense steps; at step 0 for the others, so that rank 0 decides (CLT-k's leader, DEFT's
    # planner) and what it broadcasts is real.
    parts = tuple(TensorPart(index, tuple(shape)) for index, shape in enumerate(layer_shapes))
    step, epoch = compressor.steady_step, STEADY_EPOCH
    group = GroupInfo("gradient", step, epoch, parts=parts, model_tensors=len(parts))
    sweep = torch.zeros(CACHE_SWEEP_BYTES // 4)
    compress: list[float] = []
    combining: list[float] = []
    repeats = REPEATS + 1
    while len(compress) < repeats:
        collective.calls.clear()
        # Every repeat is the same step, not a run of steps on one gradient: a memory that
        # kept what the last repeat left out would let ever more elements pass a threshold.
        feedback.load_state_dict(fresh)
        sweep.add_(1.0)
        start = time.perf_counter()
        # A copy, as the engine's flattened gradient is (into the buffer it reuses),
        # compensated in place as that one is.
        kept = buffers.flat(0, gradient.numel(), gradient)
        flat = gradient.clone() if kept is None else kept.copy_(gradient)
        payload, ctx = components.compress_with_feedback(flat, group=group, scratch=True)
        compressed = time.perf_counter()
        # What the compressor said while compressing (index sets, scalers), then its payload,
        # which the scheduler sums on the wire or gathers (``schedulers/engine/``).
        if compressor.allreducible:
            received: Payload | list[Payload] = collective.all_reduce(payload)
        else:
            received = collective.all_gather(payload, same_shape=compressor.payload_same_shape)
        exchanged = time.perf_counter()
        combine(
            compressor,
            received,
            ctx,
            like=gradient,
            **buffers.for_combine(0, gradient, gathered=not compressor.allreducible),
        )
        buffers.settle(stepped=True)
        compress.append(compressed - start)
        combining.append(time.perf_counter() - exchanged)
        if len(compress) == 2:  # a fast compressor is timed more often, within MEASURE_S
            repeats = samples_within(
                compress[1] + combining[1], MEASURE_S, least=repeats, most=MAX_REPEATS
            )
    numel = gradient.numel()
    return Wire(
        compressor=name,
        numel=numel,
        calls=tuple((kind, nbytes / numel) for kind, nbytes in collective.calls),
        compress_seconds=_median(compress[1:]),
        density=float(compressor.density),
        combine_seconds=_median(combining[1:]),
        workers=workers,
    )


def extrapolate(smaller: Wire, larger: Wire, workers: int, element_bytes: int) -> Wire:
    """``larger`` (measured at more workers than ``smaller``) taken to ``workers``: every
    call's bytes and the combine time grow (or shrink) with the power of the workers they did
    from ``smaller`` to ``larger``; a call never carries more than the dense gradient."""
    if [k for k, _ in smaller.calls] != [k for k, _ in larger.calls]:
        return replace(larger, workers=workers)  # no call-by-call growth to follow
    factor = workers / larger.workers
    step = larger.workers / smaller.workers

    def grown(before: float, after: float, cap: float) -> float:
        if before <= 0 or after <= 0:
            return after
        exponent = max(-1.0, min(1.0, math.log(after / before, step)))
        return min(after * factor**exponent, cap)

    calls = tuple(
        (kind, grown(b, a, float(element_bytes)))
        for (kind, b), (_, a) in zip(smaller.calls, larger.calls, strict=True)
    )
    combining = grown(smaller.combine_seconds, larger.combine_seconds, math.inf)
    return replace(larger, calls=calls, combine_seconds=combining, workers=workers)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]
