"""DeFT's two-queue scheduler (SPECS §7.3) as a pure state machine, apart from any tensors.

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
  FUT and nothing is applied.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gradsync.sync.knapsack import DEFAULT_UNIT, naive_knapsack, recursive_knapsack


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
    current: Gradient | None = None
    future: list[int] = field(default_factory=list)
    """Iterations merged locally, waiting to become current."""
    iteration: int = 0

    def __post_init__(self) -> None:
        if len(self.comm) != len(self.backward) or not self.comm:
            raise ValueError("DeftQueues needs one communication and one backward time a bucket")

    @property
    def buckets(self) -> int:
        return len(self.comm)

    def _knapsack(self, buckets: Sequence[int], capacity: float) -> list[int]:
        chosen = naive_knapsack([self.comm[b] for b in buckets], capacity, unit=self.unit)
        return sorted(buckets[i] for i in chosen)

    def _recursive(self, capacity: float) -> list[int]:
        """RecursiveKnapsack over a new gradient's buckets, the input side left out; the first
        bucket is ready only after its own backward."""
        candidates = list(range(self.buckets - 1))
        chosen = recursive_knapsack(
            [self.comm[b] for b in candidates],
            [self.backward[b] for b in candidates],
            capacity,
            unit=self.unit,
        )
        return [candidates[i] for i in chosen]

    def step(self) -> Step:
        t = self.iteration
        self.iteration += 1
        if not self.delay:
            return Step([], [], list(range(self.buckets)), [t])
        forward_sends: list[int] = []
        if self.current is not None and self.current.unsent:  # Case 1
            forward_sends = self._knapsack(sorted(self.current.unsent), self.forward_time)
            self.current.unsent -= set(forward_sends)
        window = self.backward_time - self.backward[0]  # nothing is ready during B_1
        if self.current is None or not self.current.unsent:  # Case 4
            applied = self.current.iterations if self.current is not None else None
            return self._renew(forward_sends, [], window, applied)
        taken = self._knapsack(sorted(self.current.unsent), self.backward_time)
        self.current.unsent -= set(taken)
        if not self.current.unsent:  # Case 3
            rest = self.backward_time - sum(self.comm[b] for b in taken)
            return self._renew(forward_sends, taken, rest, self.current.iterations)
        self.future.append(t)  # Case 2
        return Step(forward_sends, taken, [], None)

    def _renew(
        self,
        forward_sends: list[int],
        taken: list[int],
        window: float,
        applied: list[int] | None,
    ) -> Step:
        """FUT plus this iteration's gradient becomes current; part of it goes now."""
        sends = self._recursive(window)
        iterations = [*self.future, self.iteration - 1]
        self.future = []
        self.current = Gradient(iterations, set(range(self.buckets)) - set(sends))
        return Step(forward_sends, taken, sends, applied)
