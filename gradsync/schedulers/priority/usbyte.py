"""``scheduler=usbyte``: US-Byte (TPDS'23), approximated (no code was published;
docs/methods/schedulers/usbyte.md, "Where gradsync differs from the paper").

The engine of ``scheduler=bytescheduler`` (partitions all-reduced in an order every rank agrees
on, at most ``credit`` elements in flight, each layer's next forward waiting only for its own
partitions), with partitions of unequal sizes:

1. Profile. The first ``profile_steps`` steps (after a warm-up step) go as ByteScheduler sends
   them, in equal partitions of ``max_partition_size``, except that every update is applied in
   ``step()``, so the forward passes measured wait for nothing. Module hooks time each tensor's
   forward pass (``ForwardTimer``), gradient hooks its backward pass. The link's α (seconds per
   message) and β (seconds per element) come from ``scheduler.alpha`` and ``scheduler.beta``
   (per byte), or from all-reduces timed on the partitions' own process group at start-up.
   Every worker measures and the largest value over the workers is used, so all plan alike.
2. Partition. The candidates are: equal partitions of the largest and of the smallest size;
   partitions that grow from the input side (the first 2^j times the smallest size, each next
   one twice the one before, up to the largest); and the overlap rule. The overlap rule works
   from the input side: each partition is as large as can travel while the forward pass
   computes the layers before it (α + β·s ≤ that forward time, less what the link already
   carries). Where even the smallest partition cannot travel in that time, it takes the
   largest size: the link is the bottleneck there, so fewer messages pay α fewer times. Each
   candidate runs through the iteration simulator (``simulator.bytescheduler``: the backward
   pass, the link in priority order, the next forward waiting per partition) with the measured
   times. The shortest predicted iteration wins; among ties, the fewest partitions (the least
   α-β cost).
3. Order. Greedy: of the agreed-ready partitions, the one the next forward pass needs first
   (the least forward time before it) goes first; ties go to the shortest transfer, which
   finishes first. For contiguous partitions this means the input side first, which is also
   ByteScheduler's order, so the two schedulers differ only in their partitions.

Approximate: this does not reproduce the paper's own partitioning rule or its non-sequential
order of blocks. It keeps their aim: small messages where the next forward pass needs them
early, large ones where the link has time, and the fewest start-ups everywhere else.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn
from typing_extensions import Unpack

from gradsync.algorithms import simulator
from gradsync.algorithms.costs import fit_alpha_beta
from gradsync.schedulers.engine.buckets import Buckets, ForwardTimer
from gradsync.schedulers.engine.engine import EngineParts
from gradsync.schedulers.priority.config import (
    CREDIT,
    MAX_PARTITION_SIZE,
    MIN_PARTITION_SIZE,
    PROFILE_STEPS,
)
from gradsync.schedulers.priority.plan import Plan, input_first
from gradsync.schedulers.priority.priority import PrioritySync
from gradsync.types import Collective

log = logging.getLogger("gradsync")

TIMED_ELEMENTS = tuple(4**k for k in range(4, 10))  # 256 .. 262,144 elements per all-reduce
SIMULATED_ITERATIONS = 6

Need = Callable[[int], float]
"""Forward seconds before an element (counted from the input side) is first needed."""


@dataclass(frozen=True)
class Choice:
    plan: Plan
    iteration: float
    """The simulator's predicted seconds per iteration with this plan."""
    candidates: int


def forward_before(sizes: Sequence[int], forward: Sequence[float]) -> Need:
    """``Need`` of tensors of ``sizes`` and ``forward`` seconds (both in backward order), each
    tensor's time spread evenly over its elements."""
    sizes_in, seconds_in = list(reversed(sizes)), list(reversed(forward))
    starts = list(itertools.accumulate(sizes_in, initial=0))
    times = list(itertools.accumulate(seconds_in, initial=0.0))

    def need(element: int) -> float:
        if element >= starts[-1]:
            return times[-1]
        tensor = bisect.bisect_right(starts, element) - 1
        return times[tensor] + seconds_in[tensor] * (element - starts[tensor]) / sizes_in[tensor]

    return need


def from_input_side(sizes: Sequence[int]) -> Buckets:
    """Partitions given from the input side, as ``Buckets`` (numbered from the output side)."""
    return Buckets(tuple(itertools.accumulate(reversed(sizes), initial=0)))


def equal_sizes(total: int, size: int) -> list[int]:
    full, rest = divmod(total, size)
    return [size] * full + ([rest] if rest else [])


def growing_sizes(total: int, first: int, largest: int) -> list[int]:
    """From the input side: ``first``, then each twice the one before, at most ``largest``."""
    sizes, size, left = [], first, total
    while left > 0:
        sizes.append(min(size, largest, left))
        left -= sizes[-1]
        size = min(2 * size, largest)
    return sizes


def overlap_sizes(
    total: int, need: Need, *, alpha: float, beta: float, smallest: int, largest: int
) -> list[int]:
    """From the input side, each partition as large as travels while the forward pass computes
    what comes before it (the first is the smallest: nothing hides it); the largest where even
    the smallest would not (link-bound: the fewest start-ups)."""
    sizes = [min(smallest, total)]
    position, link = sizes[0], 0.0  # link: seconds the link is busy after the first arrived
    while position < total:
        slack = need(position) - link - alpha
        fits = largest if beta <= 0 or slack >= beta * largest else math.floor(slack / beta)
        size = min(fits if fits >= smallest else largest, total - position)
        sizes.append(size)
        position += size
        link += alpha + beta * size
    return sizes


def candidate_partitions(
    total: int, need: Need, *, alpha: float, beta: float, smallest: int, largest: int
) -> list[Buckets]:
    """Every distinct candidate of step 2 of the module docstring."""
    lists = [equal_sizes(total, largest), equal_sizes(total, smallest)]
    first = smallest
    while first < largest:
        lists.append(growing_sizes(total, first, largest))
        first *= 2
    lists.append(
        overlap_sizes(total, need, alpha=alpha, beta=beta, smallest=smallest, largest=largest)
    )
    unique = dict.fromkeys(tuple(s) for s in lists)
    return [from_input_side(sizes) for sizes in unique]


def need_first(buckets: Buckets, need: Need, *, alpha: float, beta: float) -> Plan:
    """The greedy order: the partition the next forward needs first, then the shortest."""
    total = buckets.total

    def key(bucket: int) -> tuple[float, float, int]:
        needed = need(total - buckets.bounds[bucket + 1])  # its input-side end
        return needed, alpha + beta * buckets.numel(bucket), -bucket

    return Plan(buckets, tuple(sorted(range(len(buckets)), key=key)))


def plan_partitions(
    sizes: Sequence[int],
    forward: Sequence[float],
    backward: Sequence[float],
    *,
    alpha: float,
    beta: float,
    smallest: int,
    largest: int,
) -> Choice:
    """The partition (and order) of tensors of ``sizes`` with per-tensor ``forward`` and
    ``backward`` seconds (backward order), for a link of ``alpha`` + ``beta``·elements."""
    need = forward_before(sizes, forward)
    candidates = candidate_partitions(
        sum(sizes), need, alpha=alpha, beta=beta, smallest=smallest, largest=largest
    )
    scored = []
    for buckets in candidates:
        times = simulator.BucketTimes(
            forward=tuple(buckets.spread(forward, sizes)),
            backward=tuple(buckets.spread(backward, sizes)),
            comm=tuple(alpha + beta * buckets.numel(b) for b in range(len(buckets))),
        )
        predicted = simulator.bytescheduler(times, partitions=1, iterations=SIMULATED_ITERATIONS)
        scored.append((predicted.iteration, buckets))
    best = min(seconds for seconds, _ in scored)
    tied = [(seconds, b) for seconds, b in scored if seconds <= best * (1 + 1e-9)]
    iteration, buckets = min(tied, key=lambda pair: len(pair[1]))
    return Choice(need_first(buckets, need, alpha=alpha, beta=beta), iteration, len(candidates))


def time_allreduces(
    collective: Collective, like: Tensor, *, clock: Callable[[], float], repeats: int = 3
) -> list[float]:
    """Median seconds of all-reduces of ``TIMED_ELEMENTS`` elements (like ``like``), left out
    of the byte counts."""
    seconds = []
    for elements in TIMED_ELEMENTS:
        payload = (torch.zeros(elements, dtype=like.dtype, device=like.device),)
        collective.all_reduce(payload)  # warm-up: buffers, connections
        times = []
        for _ in range(repeats):
            start = clock()
            collective.all_reduce(payload)
            if like.is_cuda:
                torch.cuda.synchronize(like.device)
            times.append(clock() - start)
        seconds.append(statistics.median(times))
    collective.take_bytes()
    return seconds


@dataclass
class _Profile:
    forward: list[float]
    backward: list[float]
    steps: int = 0

    def add(self, forward: Sequence[float], backward: Sequence[float]) -> None:
        self.forward = [a + b for a, b in zip(self.forward, forward, strict=True)]
        self.backward = [a + b for a, b in zip(self.backward, backward, strict=True)]
        self.steps += 1


class UsByteSync(PrioritySync):
    scheduler_name = "usbyte"

    def __init__(
        self,
        *,
        min_partition_size: int = MIN_PARTITION_SIZE,
        max_partition_size: int = MAX_PARTITION_SIZE,
        credit: int = CREDIT,
        profile_steps: int = PROFILE_STEPS,
        alpha: float | None = None,
        beta: float | None = None,
        **parts: Unpack[EngineParts],
    ) -> None:
        if not 1 <= min_partition_size <= max_partition_size:
            raise ValueError(
                "scheduler.min_partition_size must be >= 1 and <= scheduler.max_partition_size"
            )
        if profile_steps < 1:
            raise ValueError(f"scheduler.profile_steps must be >= 1, got {profile_steps}")
        if (alpha is None) != (beta is None):
            raise ValueError("give both scheduler.alpha and scheduler.beta, or neither")
        super().__init__(credit=credit, **parts)
        self.min_partition_size = min_partition_size
        self.max_partition_size = max_partition_size
        self.profile_steps = profile_steps
        self.alpha, self.beta = alpha, beta
        self._link = (0.0, 0.0)  # (α seconds, β seconds per element)
        self._profile: _Profile | None = None
        self._forward_timer: ForwardTimer | None = None

    def _prepare(self, model: nn.Module) -> None:
        like = self._params[0]
        if self.alpha is not None and self.beta is not None:
            self._link = (self.alpha, self.beta * like.element_size())
        else:  # timed and agreed on the communication thread, before any exchange
            seconds = self._on_comm(partial(time_allreduces, self._data, like, clock=self.clock))
            agreed = self._on_comm(
                partial(self.collective.reduce_metrics, seconds, device=like.device, op="max")
            )
            self._link = fit_alpha_beta([float(e) for e in TIMED_ELEMENTS], agreed)
        self._forward_timer = ForwardTimer(model, self._params, self.clock)
        self._profile = _Profile([0.0] * len(self._params), [0.0] * len(self._params))
        self._timing = True

    def _first_plan(self) -> Plan:
        return input_first(Buckets.partition(self._sizes, self.max_partition_size))

    def _use_plan(self, plan: Plan, metrics: Mapping[str, float] | None = None) -> None:
        alpha, beta = self._link
        element = self._params[0].element_size()
        sizes = [plan.buckets.numel(b) for b in range(len(plan.buckets))]
        described = {
            "sched/profiling": float(self._profile is not None),
            "sched/alpha": alpha,
            "sched/beta_per_byte": beta / element,
            "sched/smallest_partition": float(min(sizes)),
            "sched/largest_partition": float(max(sizes)),
            **(metrics or {}),
        }
        super()._use_plan(plan, described)

    def _synchronous(self) -> bool:
        return self._profile is not None

    def _after_step(self, step: int) -> None:
        profile, timer = self._profile, self._forward_timer
        if profile is None or timer is None:
            return
        backward, self._backward_s = self._backward_s, [0.0] * len(self._params)
        start, end = self._forward_marks
        forward = timer.take(max(end - start, 0.0))
        if step > 0 or profile.steps:  # the first step pays for warm-up: leave it out
            profile.add(forward, backward)
        if profile.steps >= self.profile_steps:
            self._plan_from(profile)

    def _plan_from(self, profile: _Profile) -> None:
        count = len(self._params)
        values = [v / profile.steps for v in (*profile.forward, *profile.backward)]
        # After this step's exchanges, in the communication thread's order.
        agreed = self._on_comm(
            partial(self.collective.reduce_metrics, values, device=self._params[0].device, op="max")
        )
        alpha, beta = self._link
        choice = plan_partitions(
            self._sizes,
            agreed[:count],
            agreed[count:],
            alpha=alpha,
            beta=beta,
            smallest=self.min_partition_size,
            largest=self.max_partition_size,
        )
        self._stop_profiling()
        self._use_plan(choice.plan, {"sched/model_iter_s": choice.iteration})
        log.info(
            f"usbyte: {len(choice.plan.buckets)} partitions (of {choice.candidates} candidates) "
            f"planned from {profile.steps} profiled steps, predicted "
            f"{choice.iteration * 1e3:.3f} ms per iteration"
        )

    def _stop_profiling(self) -> None:
        if self._forward_timer is not None:
            self._forward_timer.remove()
        self._forward_timer, self._profile, self._timing = None, None, False

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "planned": self._profile is None}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state["planned"]:
            self._stop_profiling()
        super().load_state_dict(state)
