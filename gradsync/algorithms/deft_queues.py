"""DeFT's two-queue scheduler (docs/methods/schedulers/deft.md, "The two queues") as a pure
state machine, apart from any tensors.

Buckets are numbered 0..N−1 from the output side (backward produces bucket 0 first); bucket
N−1 is the input side, whose backward is the last computation, so it is never sent during
backward. Each iteration's local gradient is one set of buckets. Gradients that are not sent
in time are merged locally (FUT) and travel together later (CUR); an update is applied only
when every bucket of CUR has been synchronized, with the number of merged iterations k.

Per iteration:
* forward (Case 1): buckets of CUR not yet sent go in a knapsack of the forward time.
* backward, when CUR is fully sent (Case 4, and the first iteration): CUR is applied at the end
  of the iteration; FUT plus the new gradient becomes CUR, and RecursiveKnapsack picks what of
  it goes during this backward.
* backward, when CUR still has buckets left: a knapsack of the backward time takes from them.
  If it takes all (Case 3), CUR is applied at the end, and the rest of the backward time goes
  to the new gradient (with FUT), which becomes CUR. Otherwise (Case 2) the new gradient joins
  FUT and nothing is applied. When no bucket left fits either window, the cheapest one is sent
  anyway (overrunning the backward window), or the gradient would never be applied.

With ``mu`` set there are two links: the forward knapsack and the backward knapsack of the
current gradient split their buckets between the fast link and a second one on which a bucket
takes ``mu`` times as long (``two_link_greedy``); a new gradient's buckets stay on the fast
link. Knapsack solutions are memoized: the same candidates and window recur every period, and
the runtime asks for a step every training iteration.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gradsync.algorithms.knapsack import (
    DEFAULT_UNIT,
    naive_knapsack,
    recursive_knapsack,
    two_link_greedy,
)

_MEMO_LIMIT = 4096  # solutions kept; a steady schedule needs a handful


@dataclass
class Gradient:
    """A (possibly merged) gradient: the iterations in it and its buckets not yet sent."""

    iterations: list[int]
    unsent: set[int]

    @property
    def merged(self) -> int:
        return len(self.iterations)


@dataclass(frozen=True)
class Step:
    """What one iteration does."""

    forward_sends: list[int]
    """Buckets of the gradient being synchronized, sent during this forward pass."""
    backward_sends_current: list[int]
    """More of its buckets, sent during backward (Case 2 and 3)."""
    backward_sends_new: list[int]
    """Buckets of the gradient that becomes current this iteration, sent during backward."""
    applied: list[int] | None
    """The iterations whose merged gradient is applied at the end of this iteration."""
    renewed: bool = False
    """This iteration's gradient (with FUT) became the one being synchronized."""
    slow: frozenset[int] = frozenset()
    """Which of ``forward_sends`` and ``backward_sends_current`` go on the second (slow) link;
    the others, and every bucket of ``backward_sends_new``, go on the fast link."""


@dataclass
class DeftQueues:
    comm: Sequence[float]
    """C_i: seconds to communicate bucket i."""
    backward: Sequence[float]
    """B_i: seconds of bucket i's backward."""
    forward_time: float
    backward_time: float
    unit: float = DEFAULT_UNIT
    delay: bool = True
    """False: every gradient is sent whole in its own iteration and applied at once (WFBP)."""
    mu: float | None = None
    """None: one link. Else a second link on which a bucket takes ``mu`` times as long."""
    capacity_scale: float = 1.0
    """Multiplies the forward and backward windows (the Preserver enlarges them and re-solves)."""
    current: Gradient | None = None
    future: list[int] = field(default_factory=list)
    """Iterations merged locally, waiting to become current."""
    iteration: int = 0
    _memo: dict[tuple[object, ...], tuple[list[int], frozenset[int]]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if len(self.comm) != len(self.backward) or not self.comm:
            raise ValueError("DeftQueues needs one communication and one backward time a bucket")
        if self.mu is not None and self.mu <= 0:
            raise ValueError(f"DeftQueues.mu must be > 0 or None, got {self.mu}")
        if self.capacity_scale <= 0:
            raise ValueError(f"DeftQueues.capacity_scale must be > 0, got {self.capacity_scale}")

    @property
    def buckets(self) -> int:
        return len(self.comm)

    def _remember(
        self, key: tuple[object, ...], solve: Callable[[], tuple[list[int], frozenset[int]]]
    ) -> tuple[list[int], frozenset[int]]:
        if key not in self._memo:
            if len(self._memo) >= _MEMO_LIMIT:
                self._memo.clear()
            self._memo[key] = solve()
        return self._memo[key]

    def _knapsack(
        self, buckets: Sequence[int], capacity: float
    ) -> tuple[list[int], frozenset[int]]:
        """(all buckets chosen, those of them on the slow link) of a window of ``capacity``."""
        candidates = tuple(buckets)

        def solve() -> tuple[list[int], frozenset[int]]:
            costs = [self.comm[b] for b in candidates]
            if self.mu is None:
                chosen = naive_knapsack(costs, capacity, unit=self.unit)
                return sorted(candidates[i] for i in chosen), frozenset()
            links = two_link_greedy(costs, capacity, self.mu)
            slow = frozenset(candidates[i] for i in links.slow)
            return sorted({candidates[i] for i in links.fast} | slow), slow

        chosen, slow = self._remember(("knapsack", self.mu, candidates, capacity), solve)
        return list(chosen), slow  # a copy: callers may change the lists of a Step

    def _recursive(self, capacity: float) -> list[int]:
        """RecursiveKnapsack over a new gradient's buckets, the input side left out; the first
        bucket is ready only after its own backward."""
        candidates = list(range(self.buckets - 1))

        def solve() -> tuple[list[int], frozenset[int]]:
            chosen = recursive_knapsack(
                [self.comm[b] for b in candidates],
                [self.backward[b] for b in candidates],
                capacity,
                unit=self.unit,
            )
            return [candidates[i] for i in chosen], frozenset()

        return list(self._remember(("recursive", capacity), solve)[0])

    def step(self) -> Step:
        t = self.iteration
        self.iteration += 1
        if not self.delay:
            return Step([], [], list(range(self.buckets)), [t], renewed=True)
        forward_sends: list[int] = []
        slow: frozenset[int] = frozenset()
        forward_window = self.forward_time * self.capacity_scale
        backward_window = self.backward_time * self.capacity_scale
        if self.current is not None and self.current.unsent:  # Case 1
            forward_sends, slow = self._knapsack(sorted(self.current.unsent), forward_window)
            self.current.unsent -= set(forward_sends)
        if self.current is None or not self.current.unsent:  # Case 4
            applied = self.current.iterations if self.current is not None else None
            # Nothing is ready during B_1.
            window = (self.backward_time - self.backward[0]) * self.capacity_scale
            return self._renew(forward_sends, [], window, applied, slow)
        taken, taken_slow = self._knapsack(sorted(self.current.unsent), backward_window)
        if not forward_sends and not taken:
            # No unsent bucket fits either window: the cheapest goes anyway, overrunning the
            # backward window, since otherwise the gradient would never be applied.
            taken, taken_slow = [min(self.current.unsent, key=lambda b: self.comm[b])], frozenset()
        self.current.unsent -= set(taken)
        slow |= taken_slow
        if not self.current.unsent:  # Case 3
            # The new gradient gets what the fast link has left of the window.
            rest = backward_window - sum(self.comm[b] for b in taken if b not in taken_slow)
            return self._renew(forward_sends, taken, rest, self.current.iterations, slow)
        self.future.append(t)  # Case 2
        return Step(forward_sends, taken, [], None, slow=slow)

    def _renew(
        self,
        forward_sends: list[int],
        taken: list[int],
        window: float,
        applied: list[int] | None,
        slow: frozenset[int],
    ) -> Step:
        """FUT plus this iteration's gradient becomes current; part of it goes now."""
        sends = self._recursive(window)
        iterations = [*self.future, self.iteration - 1]
        self.future = []
        self.current = Gradient(iterations, set(range(self.buckets)) - set(sends))
        return Step(forward_sends, taken, sends, applied, renewed=True, slow=slow)


def _updates(queues: DeftQueues, iterations: int) -> list[tuple[int, int]]:
    """(iteration, k) of every update applied in the next ``iterations`` steps of ``queues``
    (which is left as it is)."""
    if iterations < 0:
        raise ValueError(f"iterations must be >= 0, got {iterations}")
    run = copy.copy(queues)  # shares the memo: its solutions do not depend on the state
    run.current = copy.deepcopy(queues.current)
    run.future = list(queues.future)
    updates = []
    for t in range(iterations):
        applied = run.step().applied
        if applied is not None:
            updates.append((t, len(applied)))
    return updates


def update_sizes(queues: DeftQueues, iterations: int) -> list[int]:
    """k of every update applied in the next ``iterations`` steps of ``queues`` (which is left
    as it is): the variable batch sizes, in iterations, that the Preserver compares."""
    return [k for _, k in _updates(queues, iterations)]


def steady_period(queues: DeftQueues, iterations: int = 60) -> tuple[list[int], int]:
    """One period of the schedule once its queues have filled: (k of each update in it, the
    iterations it spans). The first half of ``iterations`` is left out; the period is the
    shortest run of k that repeats through the second half. A schedule that applies nothing
    there gives no updates over the half it ran."""
    half = iterations // 2
    tail = [k for t, k in _updates(queues, iterations) if t >= half]
    for length in range(1, len(tail) + 1):
        if all(tail[i] == tail[i + length] for i in range(len(tail) - length)):
            return tail[:length], sum(tail[:length])
    return [], iterations - half
