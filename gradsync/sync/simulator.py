"""A discrete-event model of one worker's iterations (SPECS §7.5 [R]): a compute stream and a
link, fed with per-bucket forward, backward and communication times. It predicts the
iteration time, the share of it the compute stream idles (bubble ratio) and how often an update
is applied, for WFBP, ByteScheduler and DeFT (one link), so schedules can be compared at
bandwidths and scales this machine cannot run.

Buckets are numbered from the output side (backward produces bucket 0 first; forward runs from
the input side, bucket N−1, to bucket 0).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gradsync.sync.deft_queues import DeftQueues


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
class Prediction:
    iteration: float
    """Seconds between the starts of consecutive iterations, in the steady state."""
    bubble_ratio: float
    """Share of an iteration the compute stream waits for communication."""
    update_frequency: float
    """Updates applied per iteration."""


def _steady(starts: Sequence[float], times: BucketTimes, updates: int) -> Prediction:
    """From the start times of iterations; the first half is left out as warm-up."""
    half = len(starts) // 2
    iteration = (starts[-1] - starts[half]) / (len(starts) - 1 - half)
    bubble = max(0.0, 1 - times.compute / iteration) if iteration > 0 else 0.0
    return Prediction(iteration, bubble, updates / (len(starts) - 1))


def _ready_times(start: float, times: BucketTimes) -> list[float]:
    """When each bucket's gradient is ready in a backward pass that starts at ``start``."""
    ready, now = [], start
    for seconds in times.backward:
        now += seconds
        ready.append(now)
    return ready


def wfbp(times: BucketTimes, iterations: int = 20) -> Prediction:
    """Each bucket is sent once it is ready, in backward order; the update waits for all."""
    starts, compute, link = [], 0.0, 0.0
    for _ in range(iterations + 1):
        start = max(compute, link)  # the update needs every bucket of the last iteration
        starts.append(start)
        ready = _ready_times(start + sum(times.forward), times)
        for bucket, at in enumerate(ready):
            link = max(link, at) + times.comm[bucket]
        compute = ready[-1]
    return _steady(starts, times, iterations)


def bytescheduler(times: BucketTimes, partitions: int = 4, iterations: int = 20) -> Prediction:
    """Buckets cut into ``partitions`` equal pieces; the link always sends the ready piece of the
    bucket nearest the input first; a bucket's next forward waits only for its own pieces."""
    n = len(times.comm)
    done = [0.0] * n  # when each bucket's last piece of the previous iteration arrived
    starts, compute, link = [], 0.0, 0.0
    for _ in range(iterations + 1):
        now = compute
        starts.append(max(now, done[n - 1]))
        for bucket in reversed(range(n)):  # forward, input side first
            now = max(now, done[bucket]) + times.forward[bucket]
        ready = _ready_times(now, times)
        compute = ready[-1]
        pieces = [(b, times.comm[b] / partitions) for b in range(n) for _ in range(partitions)]
        left = {b: partitions for b in range(n)}
        while pieces:
            available = [p for p in pieces if ready[p[0]] <= link]
            if not available:
                link = min(ready[p[0]] for p in pieces)
                continue
            piece = max(available, key=lambda p: p[0])  # priority to the input side
            pieces.remove(piece)
            link += piece[1]
            left[piece[0]] -= 1
            if left[piece[0]] == 0:
                done[piece[0]] = link
    return _steady(starts, times, iterations)


def deft(times: BucketTimes, iterations: int = 20) -> Prediction:
    """DeFT's two queues (one link) with the knapsack windows of the profiled times: sends of
    the gradient in flight start with the forward pass and the backward pass, a new gradient's
    buckets when they are ready; an iteration that applies an update waits for its last send."""
    queues = DeftQueues(
        comm=times.comm,
        backward=times.backward,
        forward_time=sum(times.forward),
        backward_time=sum(times.backward),
    )
    starts, compute, link = [], 0.0, 0.0
    updates = 0
    in_flight_done = 0.0  # when the last send so far of the gradient in flight completes
    for _ in range(iterations + 1):
        start = compute
        starts.append(start)
        before = queues.current
        step = queues.step()
        backward_start = start + sum(times.forward)
        for bucket in step.forward_sends:
            link = max(link, start) + times.comm[bucket]
            in_flight_done = link
        for bucket in step.backward_sends_current:
            link = max(link, backward_start) + times.comm[bucket]
            in_flight_done = link
        applied_done = in_flight_done
        ready = _ready_times(backward_start, times)
        if queues.current is not before:  # this iteration's gradient is now the one in flight
            in_flight_done = 0.0
            for bucket in step.backward_sends_new:
                link = max(link, ready[bucket]) + times.comm[bucket]
                in_flight_done = link
        compute = ready[-1]
        if step.applied is not None:  # the update needs every bucket of what it applies
            updates += 1
            compute = max(compute, applied_done)
    return _steady(starts, times, updates)


SCHEDULES = {"wfbp": wfbp, "bytescheduler": bytescheduler, "deft": deft}


def coverage_rate(times: BucketTimes) -> float:
    """T_comm / (T_fwd + T_bwd): above 1, communication cannot all hide behind computation."""
    compute = times.compute
    return sum(times.comm) / compute if compute > 0 else math.inf
