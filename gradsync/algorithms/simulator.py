"""A discrete-event model of one worker's iterations: a compute stream and one or two links,
fed with per-bucket forward, backward and communication times (docs/methods/index.md, "How the
simulator models an iteration"). It predicts the iteration time, the share of it the compute
stream idles (bubble ratio) and how often an update is applied, for WFBP, ByteScheduler, US-Byte
and DeFT (one or two links), so schedules can be compared at bandwidths and scales this machine
cannot run. Each prediction also carries the timeline of one steady-state iteration, to be drawn.

Buckets are numbered from the output side (backward produces bucket 0 first; forward runs from
the input side, bucket N−1, to bucket 0).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gradsync.algorithms.deft_queues import DeftQueues

PAPER_MU = 1.65  # DeFT's slow-link factor (NCCL over gloo for large tensors), when not measured
COMPUTE, LINK_1, LINK_2 = "compute", "link 1", "link 2"
STREAMS = (COMPUTE, LINK_1, LINK_2)
MAX_PIECES = 16  # most messages US-Byte cuts one bucket into
CONTENTION_ROUNDS = 30  # damped rounds of ``contended``; it settles in well under this


@dataclass(frozen=True)
class BucketTimes:
    forward: tuple[float, ...]
    backward: tuple[float, ...]
    comm: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.comm or not len(self.forward) == len(self.backward) == len(self.comm):
            raise ValueError("BucketTimes needs forward, backward and comm times of each bucket")

    @property
    def compute(self) -> float:
        return sum(self.forward) + sum(self.backward)


@dataclass(frozen=True)
class Event:
    """Something one stream does, in seconds from the start of the recorded iteration."""

    stream: str
    """``compute``, ``link 1`` or ``link 2``."""
    start: float
    end: float
    label: str
    """``F3``/``B3``: bucket 3's forward/backward; ``C3``: its communication, ``C3 t-1`` when
    the gradient sent is from an earlier iteration than the one recorded."""


@dataclass(frozen=True)
class Prediction:
    iteration: float
    """Seconds between the starts of consecutive iterations, in the steady state."""
    bubble_ratio: float
    """Share of an iteration the compute stream waits for communication."""
    update_frequency: float
    """Updates applied per iteration."""
    timeline: tuple[Event, ...] = field(default=(), compare=False, repr=False)
    """What every stream does during the last simulated iteration (clipped to it)."""
    timeline_span: float = field(default=0.0, compare=False)
    """The length of that iteration: ``iteration`` unless the steady state repeats over
    several iterations (DeFT merging gradients)."""


class _Recorder:
    """Every event of a simulation, with the iteration of the gradient a send carries."""

    def __init__(self) -> None:
        self._events: list[tuple[str, float, float, str, int | None]] = []

    def add(
        self, stream: str, start: float, end: float, label: str, gradient: int | None = None
    ) -> None:
        if end > start:
            self._events.append((stream, start, end, label, gradient))

    def compute(self, start: float, forward: bool, bucket: int, seconds: float) -> float:
        self.add(COMPUTE, start, start + seconds, f"{'F' if forward else 'B'}{bucket}")
        return start + seconds

    def window(self, iteration: int, start: float, end: float) -> tuple[Event, ...]:
        """The events overlapping [start, end), clipped to it, from ``start``."""
        shown = []
        for stream, a, b, label, gradient in self._events:
            if b <= start or a >= end:
                continue
            if gradient is not None and gradient < iteration:
                label = f"{label} t-{iteration - gradient}"
            shown.append(Event(stream, max(a, start) - start, min(b, end) - start, label))
        return tuple(sorted(shown, key=lambda e: (STREAMS.index(e.stream), e.start)))


def _steady(
    starts: Sequence[float],
    times: BucketTimes,
    updates: int,
    recorder: _Recorder,
    other_work: float = 0.0,
) -> Prediction:
    """From the start times of iterations; the first half is left out as warm-up. The timeline
    is that of the last complete iteration. ``other_work``: seconds per iteration the compute
    stream is busy besides the passes."""
    half = len(starts) // 2
    iteration = (starts[-1] - starts[half]) / (len(starts) - 1 - half)
    busy = times.compute + other_work
    bubble = max(0.0, 1 - busy / iteration) if iteration > 0 else 0.0
    last = len(starts) - 2
    timeline = recorder.window(last, starts[last], starts[-1])
    span = starts[-1] - starts[last]
    return Prediction(iteration, bubble, updates / (len(starts) - 1), timeline, span)


def _forward(now: float, times: BucketTimes, recorder: _Recorder) -> float:
    """A forward pass from ``now`` that waits for nothing; when it ends."""
    for bucket in reversed(range(len(times.forward))):
        now = recorder.compute(now, True, bucket, times.forward[bucket])
    return now


def _backward(start: float, times: BucketTimes, recorder: _Recorder) -> list[float]:
    """When each bucket's gradient is ready in a backward pass that starts at ``start``."""
    ready, now = [], start
    for bucket, seconds in enumerate(times.backward):
        now = recorder.compute(now, False, bucket, seconds)
        ready.append(now)
    return ready


def wfbp(times: BucketTimes, iterations: int = 20) -> Prediction:
    """Each bucket is sent once it is ready, in backward order; the update waits for all."""
    recorder = _Recorder()
    starts, compute, link = [], 0.0, 0.0
    for it in range(iterations + 1):
        start = max(compute, link)  # the update needs every bucket of the last iteration
        starts.append(start)
        ready = _backward(_forward(start, times, recorder), times, recorder)
        for bucket, at in enumerate(ready):
            begin = max(link, at)
            link = begin + times.comm[bucket]
            recorder.add(LINK_1, begin, link, f"C{bucket}", it)
        compute = ready[-1]
    return _steady(starts, times, iterations, recorder)


def _message(comm: float, alpha: float, pieces: int) -> float:
    """Seconds of one of ``pieces`` equal parts of a bucket that takes ``comm`` whole: each
    part pays the start-up ``alpha`` (at most ``comm``) again."""
    alpha = min(alpha, comm)
    return alpha + (comm - alpha) / pieces


def bytescheduler(
    times: BucketTimes, partitions: int = 4, iterations: int = 20, *, alpha: float = 0.0
) -> Prediction:
    """Buckets cut into ``partitions`` equal pieces (each paying the start-up ``alpha``); the
    link always sends the ready piece of the bucket nearest the input first; a bucket's next
    forward waits only for its own pieces."""
    n = len(times.comm)
    recorder = _Recorder()
    done = [0.0] * n  # when each bucket's last piece of the previous iteration arrived
    starts, compute, link = [], 0.0, 0.0
    for it in range(iterations + 1):
        now = compute
        starts.append(max(now, done[n - 1]))
        for bucket in reversed(range(n)):  # forward, input side first
            now = recorder.compute(max(now, done[bucket]), True, bucket, times.forward[bucket])
        ready = _backward(now, times, recorder)
        compute = ready[-1]
        piece = [_message(times.comm[b], alpha, partitions) for b in range(n)]
        pieces = [b for b in range(n) for _ in range(partitions)]
        left = {b: partitions for b in range(n)}
        while pieces:
            available = [b for b in pieces if ready[b] <= link]
            if not available:
                link = min(ready[b] for b in pieces)
                continue
            bucket = max(available)  # priority to the input side
            pieces.remove(bucket)
            recorder.add(LINK_1, link, link + piece[bucket], f"C{bucket}", it)
            link += piece[bucket]
            left[bucket] -= 1
            if left[bucket] == 0:
                done[bucket] = link
    return _steady(starts, times, iterations, recorder)


@dataclass(frozen=True)
class Block:
    """A US-Byte message: a contiguous run of the backward-ordered gradient."""

    first: int
    """The bucket (output side) where it starts."""
    last: int
    """The bucket where it ends: it is ready when this bucket's backward ends, and the forward
    of every bucket from ``first`` to ``last`` waits for it."""
    seconds: float


def _packed(times: BucketTimes, alpha: float, cap: float) -> list[Block]:
    """Buckets split into equal pieces whose bandwidth term is at most ``cap``, and consecutive
    pieces (of different buckets) merged while their bandwidth terms still fit in ``cap``: the
    fewest messages, so the least start-up time, with no message longer than ``alpha + cap``."""
    blocks: list[Block] = []
    first, load = 0, 0.0
    for bucket, comm in enumerate(times.comm):
        beta = comm - alpha
        count = min(max(1, math.ceil(beta / cap - 1e-9)), MAX_PIECES) if cap > 0 else 1
        for _ in range(count):
            piece = beta / count
            if blocks and load > 0 and load + piece <= cap * (1 + 1e-9):
                previous = blocks.pop()  # extend the open message to this bucket
                first, load = previous.first, load + piece
            else:
                first, load = bucket, piece
            blocks.append(Block(first, bucket, alpha + load))
    return blocks


def usbyte_partitions(times: BucketTimes, alpha: float = 0.0, pieces: int = 4) -> list[list[Block]]:
    """The candidate partitions US-Byte chooses from: one message a bucket (DDP's), ``pieces``
    equal messages a bucket (ByteScheduler's), and for message caps from the whole gradient
    down to 1/128 of it, the fewest messages under the cap (``_packed``): unequal sizes,
    small buckets merged and large ones split."""
    alpha = min([alpha, *times.comm])
    candidates = [
        [Block(b, b, c) for b, c in enumerate(times.comm)],
        [
            Block(b, b, _message(c, alpha, pieces))
            for b, c in enumerate(times.comm)
            for _ in range(pieces)
        ],
    ]
    total = sum(times.comm) - alpha * len(times.comm)
    for j in range(8):
        packed = _packed(times, alpha, total / 2**j)
        if packed not in candidates:
            candidates.append(packed)
    return candidates


def _priority_run(times: BucketTimes, blocks: Sequence[Block], iterations: int) -> Prediction:
    """Messages ``blocks`` every iteration, each sent when ready; whenever the link is free,
    the ready message needed first by the next forward pass (the one reaching nearest the
    input side) goes, and of those needed equally soon the shortest, which is through first.
    A bucket's next forward waits only for its own messages."""
    n = len(times.comm)
    by_last: list[list[Block]] = [[] for _ in range(n)]
    for block in sorted(blocks, key=lambda b: -b.seconds):  # popped from the end: shortest
        by_last[block.last].append(block)
    recorder = _Recorder()
    done = [0.0] * n
    starts, compute, link = [], 0.0, 0.0
    for it in range(iterations + 1):
        now = compute
        starts.append(max(now, done[n - 1]))
        for bucket in reversed(range(n)):
            now = recorder.compute(max(now, done[bucket]), True, bucket, times.forward[bucket])
        ready = _backward(now, times, recorder)
        compute = ready[-1]
        queues = [list(q) for q in by_last]
        left = len(blocks)
        while left:
            # The ready message reaching nearest the input side (the highest ``last``).
            newest = max((b for b in range(n) if ready[b] <= link), default=-1)
            last = next((b for b in range(newest, -1, -1) if queues[b]), None)
            if last is None:
                link = min(ready[b] for b in range(n) if queues[b])
                continue
            chosen = queues[last].pop()
            left -= 1
            span = f"C{chosen.first}" + (f"-{chosen.last}" if chosen.last > chosen.first else "")
            recorder.add(LINK_1, link, link + chosen.seconds, span, it)
            link += chosen.seconds
            for bucket in range(chosen.first, chosen.last + 1):
                done[bucket] = link  # the link only moves on: a bucket's last message wins
    return _steady(starts, times, iterations, recorder)


def usbyte(
    times: BucketTimes, iterations: int = 20, *, alpha: float = 0.0, pieces: int = 4
) -> Prediction:
    """US-Byte (TPDS'23; no code published), approximated (docs/methods/index.md, "Bucketed
    schedules: a discrete-event simulator"): of the candidate partitions of
    ``usbyte_partitions`` (each the fewest messages, so the least α-β cost, under a cap on a
    message's length), the one whose predicted iteration is shortest, i.e. the cheapest that
    still overlaps; messages go in a greedy non-sequential order across the backward and the
    next forward stage (``_priority_run``). ``alpha`` is a message's start-up
    time, already once in every bucket's ``comm``. Approximate: the paper's own partitioning
    rule and order are not reproduced, only their aim."""
    runs = [_priority_run(times, p, iterations) for p in usbyte_partitions(times, alpha, pieces)]
    return min(runs, key=lambda p: p.iteration)


def deft(
    times: BucketTimes,
    iterations: int = 20,
    *,
    mu: float | None = None,
    capacity_scale: float = 1.0,
    planned: BucketTimes | None = None,
    between: float = 0.0,
    update: float = 0.0,
) -> Prediction:
    """DeFT's two queues with the knapsack windows of the profiled times: sends of the gradient
    in flight start with the forward pass and the backward pass, a new gradient's buckets when
    they are ready; every step waits for the sends it started but the new gradient's (those go
    on over the next forward pass when it is applied later), as the engine's does. With ``mu``, a
    second link on which a bucket takes ``mu`` times as long carries the knapsacks' slow share.
    A bucket too long for every window goes alone, overrunning the backward pass (split such
    buckets first, as DeFT does). ``planned``: the times the knapsacks are solved from, when
    the job solved them from its own measurements rather than from ``times`` (the same
    buckets); the iterations are still timed with ``times``. ``between``: what the compute
    stream does after every backward pass before the next forward (load a batch, combine), and
    ``update``: the optimizer's step, on the iterations that apply one; the links go on
    carrying the sends in flight meanwhile (they are not drawn on the timeline)."""
    solved_from = planned or times
    queues = DeftQueues(
        comm=solved_from.comm,
        backward=solved_from.backward,
        forward_time=sum(solved_from.forward),
        backward_time=sum(solved_from.backward),
        mu=mu,
        capacity_scale=capacity_scale,
    )
    recorder = _Recorder()
    starts, compute = [], 0.0
    links = {LINK_1: 0.0, LINK_2: 0.0}  # when each link is next free
    updates = 0
    carried = 0.0  # when the new gradient's sends a step left in flight complete

    def send(bucket: int, earliest: float, slow: bool, gradient: int | None) -> float:
        link = LINK_2 if slow else LINK_1
        seconds = times.comm[bucket] * (mu if slow and mu is not None else 1.0)
        begin = max(links[link], earliest)
        links[link] = begin + seconds
        recorder.add(link, begin, links[link], f"C{bucket}", gradient)
        return links[link]

    for it in range(iterations + 1):
        start = compute
        starts.append(start)
        before = queues.current
        gradient = before.iterations[-1] if before is not None else None
        step = queues.step()
        backward_start = _forward(start, times, recorder)
        # As the engine's step does: it waits for every send it started, and for those an
        # earlier step left in flight; only the new gradient's sends, when it is applied in a
        # later step, go on over the next forward pass.
        waits = [carried]
        waits += [send(b, start, b in step.slow, gradient) for b in step.forward_sends]
        waits += [
            send(b, backward_start, b in step.slow, gradient) for b in step.backward_sends_current
        ]
        ready = _backward(backward_start, times, recorder)
        new = [send(b, ready[b], False, it) for b in step.backward_sends_new]
        applied_now = step.applied is not None and it in step.applied
        leaves_new_in_flight = step.renewed and not applied_now
        carried = max(new, default=0.0) if leaves_new_in_flight else 0.0
        if not leaves_new_in_flight:
            waits += new
        compute = max(ready[-1], *waits)
        if step.applied is not None:
            updates += 1
            compute += update
        compute += between
    other_work = between + update * updates / iterations  # as update_frequency counts them
    return _steady(starts, times, updates, recorder, other_work)


def busy_links_key(links: Iterable[str]) -> str:
    """The name of a set of busy links: ``link 1``, ``link 2``, ``link 1+link 2``."""
    return "+".join(sorted(links))


def contended(
    schedule: Callable[[BucketTimes], Prediction],
    times: BucketTimes,
    busy_link_slowdown: Mapping[str, float],
) -> Prediction:
    """``schedule`` on cores that also move the bytes: while a set of links is busy, compute
    runs ``busy_link_slowdown[set]`` times slower (``busy_links_key``; a set not given runs at
    full speed). How much of the forward and of the backward pass overlaps the links depends
    on how long they take, so the passes are stretched until the overlap they are stretched
    for is the overlap they get (a fixed point, found by damped iteration)."""
    if not busy_link_slowdown:
        return schedule(times)
    stretch = (1.0, 1.0)
    for _ in range(CONTENTION_ROUNDS):
        prediction = schedule(_stretched(times, stretch))
        wanted = _stretch_for(prediction.timeline, busy_link_slowdown)
        if all(abs(w - s) < 1e-3 * s for w, s in zip(wanted, stretch, strict=True)):
            break
        stretch = ((stretch[0] + wanted[0]) / 2, (stretch[1] + wanted[1]) / 2)
    return prediction


def _stretched(times: BucketTimes, stretch: tuple[float, float]) -> BucketTimes:
    forward, backward = stretch
    return BucketTimes(
        forward=tuple(f * forward for f in times.forward),
        backward=tuple(b * backward for b in times.backward),
        comm=times.comm,
    )


def _stretch_for(
    timeline: Sequence[Event], busy_link_slowdown: Mapping[str, float]
) -> tuple[float, float]:
    """How many times longer than at full speed the forward and the backward pass of
    ``timeline`` take, given which links are busy while they run: a stretch of ``t`` seconds
    under slowdown ``s`` does ``t/s`` seconds of full-speed work."""
    links = [e for e in timeline if e.stream != COMPUTE]
    cuts = sorted({t for e in links for t in (e.start, e.end)})
    # The slowdown between consecutive cuts, found once, not again for every compute event.
    slowdowns = [
        busy_link_slowdown.get(
            busy_links_key({e.stream for e in links if e.start < b and e.end > a}), 1.0
        )
        for a, b in itertools.pairwise(cuts)
    ]
    took = {"F": 0.0, "B": 0.0}
    work = {"F": 0.0, "B": 0.0}
    for event in (e for e in timeline if e.stream == COMPUTE):
        now, cut = event.start, bisect.bisect_right(cuts, event.start)
        while now < event.end:  # cuts[cut - 1] <= now < cuts[cut]: segment cut - 1
            end = min(event.end, cuts[cut]) if cut < len(cuts) else event.end
            slowdown = slowdowns[cut - 1] if 0 < cut < len(cuts) else 1.0
            took[event.label[0]] += end - now
            work[event.label[0]] += (end - now) / slowdown
            now, cut = end, cut + 1
    forward, backward = (took[p] / work[p] if work[p] > 0 else 1.0 for p in "FB")
    return forward, backward


def coverage_rate(times: BucketTimes) -> float:
    """T_comm / (T_fwd + T_bwd): above 1, communication cannot all hide behind computation."""
    compute = times.compute
    return sum(times.comm) / compute if compute > 0 else math.inf
