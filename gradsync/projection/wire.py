"""What a compressor puts on the wire, measured rather than described: the real compressor runs
on the profiled gradient against a collective that only records each call's kind and bytes.
One place knows every method's format (its own code), and the cost model prices the calls.

The recording collective stands for workers whose gradients are identical, so index sets that
grow with the workers (union top-k's build-up) are priced at one worker's size.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gradsync.comm.solo import SoloCollective

if TYPE_CHECKING:
    from torch import Tensor

    from gradsync.projection.cluster import Cluster
    from gradsync.types import Compressor, ErrorFeedback, Payload

RECORDED_WORLD = 2  # compressors take their multi-worker code paths
LENGTH_BYTES = 8  # one int64 length per worker
REPEATS = 3


class RecordingCollective(SoloCollective):
    """A world of identical workers: every call records (kind, bytes this worker sends), one
    per tensor of the payload, as the real collective runs them (``comm/collective.py``)."""

    world_size = RECORDED_WORLD

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def record(self, kind: str, payload: Payload) -> None:
        self.calls += [(kind, t.numel() * t.element_size()) for t in payload]

    def all_reduce(self, payload: Payload, *, op: str = "sum") -> Payload:
        self.record("all_reduce", payload)
        return payload

    def start_all_reduce(self, payload: Payload, *, op: str = "sum") -> Callable[[], Payload]:
        self.record("all_reduce", payload)
        return lambda: payload

    def all_gather(self, payload: Payload) -> list[Payload]:
        self.record("all_gather", payload)
        return [payload] * RECORDED_WORLD

    def broadcast(self, payload: Payload, *, src: int) -> Payload:
        self.record("broadcast", payload)
        return payload


@dataclass(frozen=True)
class Wire:
    """One compressor's exchange of a flat gradient of ``numel`` elements."""

    compressor: str
    numel: int
    calls: tuple[tuple[str, float], ...]
    """(collective, bytes per gradient element) of every call of one compress + exchange."""
    compress_seconds: float
    """compress + decompress of the whole gradient on this machine."""
    density: float
    """Fraction of the elements the compressor selects (1.0 for dense methods)."""

    def bytes_sent(self, elements: float) -> float:
        return sum(rate for _, rate in self.calls) * elements

    def transfer_seconds(self, cluster: Cluster, elements: float) -> float:
        """The collectives that exchange ``elements`` of the gradient (a bucket, or all)."""
        prices = {
            "all_reduce": cluster.all_reduce,
            # Ragged tensors: the workers first gather each other's lengths.
            "all_gather": lambda nbytes: (
                cluster.all_gather(LENGTH_BYTES) + cluster.all_gather(nbytes)
            ),
            "broadcast": cluster.broadcast,
        }
        return sum(prices[kind](rate * elements) for kind, rate in self.calls)

    def exchange_seconds(self, cluster: Cluster, elements: float) -> float:
        """Compress, exchange and decompress ``elements`` of the gradient."""
        compress = self.compress_seconds * elements / self.numel
        return compress + self.transfer_seconds(cluster, elements)


def measure_wire(
    name: str,
    compressor: Compressor,
    feedback: ErrorFeedback,
    gradient: Tensor,
    layer_sizes: Sequence[int],
) -> Wire:
    """Run ``compressor`` with its error feedback on ``gradient`` (one flat group of
    ``layer_sizes`` tensors), as the schedulers do (``SyncComponents.compress_with_feedback``),
    recording its collectives; REPEATS times for a median time."""
    from gradsync.sync.base import SyncComponents

    collective = RecordingCollective()
    components = SyncComponents(
        compressor=compressor, feedback=feedback, collective=collective, clock=time.perf_counter
    )
    seconds = []
    for _ in range(REPEATS + 1):
        collective.calls.clear()
        start = time.perf_counter()
        # Step 0 every time: rank 0 is then the one that decides (CLT-k's leader, DEFT's
        # planner), so what it broadcasts is real.
        payload, ctx = components.compress_with_feedback(
            gradient.clone(), name="gradient", step=0, epoch=0, sizes=list(layer_sizes)
        )
        compressor.decompress(payload, ctx)  # the receiving side
        seconds.append(time.perf_counter() - start)
    # What the compressor said while compressing (index sets, scalers), then its payload,
    # which the scheduler sums on the wire or gathers (``sync/exchanges.py``).
    collective.record("all_reduce" if compressor.allreducible else "all_gather", payload)
    numel = gradient.numel()
    return Wire(
        compressor=name,
        numel=numel,
        calls=tuple((kind, nbytes / numel) for kind, nbytes in collective.calls),
        compress_seconds=sorted(seconds[1:])[len(seconds[1:]) // 2],
        density=float(compressor.density),
    )
