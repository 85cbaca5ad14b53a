"""What a cost model is asked about and what it answers: the model's profile on this machine,
what a compressor puts on the wire (as ``measure/wire.py`` records it), the job (profile,
cluster, what travels, the scheduler's options) and the estimate of its
iteration time. Types alone, so the scheduler registry, the cost models and the measuring code
share them without importing one another."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from omegaconf import DictConfig

from gradsync.projection.cluster import Cluster
from gradsync.projection.selection import SelectionCost

if TYPE_CHECKING:
    from gradsync.algorithms.simulator import Prediction


@dataclass(frozen=True)
class ModelProfile:
    model: str
    sizes: tuple[int, ...]
    """Elements of every trainable tensor, in backward order (output side first)."""
    forward: tuple[float, ...]
    backward: tuple[float, ...]
    update: float
    """Seconds of one optimizer step over the whole model."""
    data: float
    """Seconds to load one batch in the training process (0 with loader worker processes,
    which prefetch it)."""
    batch_size: int
    element_bytes: int

    def scaled(self, factor: float) -> ModelProfile:
        """This profile on a machine whose compute takes ``factor`` times as long."""
        if factor == 1.0:
            return self
        return replace(
            self,
            forward=tuple(t * factor for t in self.forward),
            backward=tuple(t * factor for t in self.backward),
            update=self.update * factor,
            data=self.data * factor,
        )

    def with_passes(self, forward_s: float, backward_s: float) -> ModelProfile:
        """This profile with forward and backward taking ``forward_s`` and ``backward_s`` in
        all, each spread over the tensors as profiled."""
        return replace(
            self,
            forward=_spread(forward_s, self.forward),
            backward=_spread(backward_s, self.backward),
        )

    @property
    def compute(self) -> float:
        return sum(self.forward) + sum(self.backward) + self.update

    @property
    def numel(self) -> int:
        return sum(self.sizes)


def _spread(total: float, shares: tuple[float, ...]) -> tuple[float, ...]:
    """``total`` split in proportion to ``shares`` (evenly when they are all zero)."""
    whole = sum(shares)
    if whole <= 0:
        return tuple(total / len(shares) for _ in shares)
    return tuple(total * share / whole for share in shares)


@dataclass(frozen=True)
class Job:
    profile: ModelProfile
    cluster: Cluster
    wire: Wire
    scheduler: DictConfig
    """The composed ``scheduler`` options."""
    decisions: Mapping[str, float] = field(default_factory=dict)
    """What the scheduler decides from measurements inside the job (its registry entry's
    ``decisions``), when known: OMGS's fitted γ, α, β (its plan follows them, its time the
    cluster's costs); DeFT's knapsack ``capacity_scale`` and ``mu``."""
    logged_plan: object | None = None
    """What the scheduler planned from inside the job, as its registry entry's ``plan_reader``
    reads it from the run's directory, when known (DeFT's buckets and the times it solved its
    knapsacks from): the schedule follows it, its time the cluster's costs."""
    cores_busy_share: float = 1.0
    """The share of the compute stream during which the host's cores are busy: below 1 when
    the stream is the slowest worker's (a trace-driven prediction) and the others finished
    earlier. Exchanges made after it are priced as on idle cores (``Cluster.idle``)."""
    between: float = 0.0
    """Seconds each iteration spends outside its passes, exchanges and update: loading its
    batch, combining what arrived, waiting for the slowest worker (set by ``predict``)."""


@dataclass(frozen=True)
class Estimate:
    iteration: float
    """Seconds per iteration in the steady state."""
    updates_per_iteration: float = 1.0
    simulated: Prediction | None = field(default=None, compare=False)
    """The simulator's prediction (with its timeline), for the bucketed schedules."""
    includes_between: bool = False
    """``iteration`` already holds ``Job.between``: a schedule whose links go on carrying
    sends while the workers load the next batch overlaps it; the others pay it after."""
    groups: int | None = None
    """Groups (buckets, partitions) the gradient is exchanged in each iteration, as the model
    cuts it; None where it is not cut so (parameter servers)."""

    def samples_per_s(self, batch_size: int, workers: int) -> float:
        return batch_size * workers / self.iteration


LENGTH_BYTES = 8  # one int64 length per worker
LENGTHS = "all_gather_lengths"
"""The call of a ragged all-gather that tells every worker the others' lengths: one per payload
whose shapes differ among workers, of a few bytes whatever the gradient (``comm/collective.py``)."""


@dataclass(frozen=True)
class Wire:
    """One compressor's exchange of a flat gradient of ``numel`` elements among ``workers``."""

    compressor: str
    numel: int
    calls: tuple[tuple[str, float], ...]
    """(collective, bytes per gradient element) of every call of one compress + exchange."""
    compress_seconds: float
    """Compensate, compress and remember (error feedback) the whole gradient on this machine."""
    density: float
    """Fraction of the elements the compressor selects (1.0 for dense methods)."""
    combine_seconds: float = 0.0
    """Turning what every worker sent into the summed gradient (``engine/combine.py``)."""
    workers: int = 1
    selects_alone: bool = False
    """The compression is one worker's while the others wait (the compressor's own
    ``selects_alone``, set where the wire is used, so that earlier measurements have it)."""
    selection: SelectionCost | None = None
    """The cluster's cost of compressing a group, when given (``with_selection``): it replaces
    the time measured here, which grows in proportion to the elements."""

    def scaled(self, factor: float, *, alone: float | None = None) -> Wire:
        """This exchange on a machine whose compute takes ``factor`` times as long, or
        ``alone`` times for a selection one worker makes while the others wait (the workers'
        sharing of a host's cores is in ``factor``, not in ``alone``)."""
        compress = alone if self.selects_alone and alone is not None else factor
        return replace(
            self,
            compress_seconds=self.compress_seconds * compress,
            combine_seconds=self.combine_seconds * factor,
        )

    def with_selection(self, cost: SelectionCost | None) -> Wire:
        """This exchange with compression priced by ``cost`` (unchanged when None)."""
        if cost is None:
            return self
        return replace(self, selection=cost, compress_seconds=cost.seconds(self.numel))

    def compress_of(self, elements: float) -> float:
        """Seconds to compress a group of ``elements``."""
        if self.selection is not None:
            return self.selection.seconds(elements)
        return self.compress_seconds * elements / self.numel

    def bytes_sent(self, elements: float) -> float:
        return sum(rate for _, rate in self.calls) * elements

    def transfer_seconds(self, cluster: Cluster, elements: float) -> float:
        """The collectives that exchange ``elements`` of the gradient (a bucket, or all); the
        workers meet at the first (``Cluster.meeting``)."""
        calls = [
            ("all_gather", LENGTH_BYTES) if kind == LENGTHS else (kind, rate * elements)
            for kind, rate in self.calls
        ]
        if not calls:
            return 0.0
        (first_kind, first_bytes), *rest = calls
        seconds = _price(cluster.meeting(), first_kind, first_bytes)
        return seconds + sum(_price(cluster, kind, nbytes) for kind, nbytes in rest)

    def exchange_seconds(self, cluster: Cluster, elements: float) -> float:
        """Compress and exchange ``elements`` of the gradient (combining what arrived is paid
        once per iteration, after the last exchange, as the schedulers do)."""
        return self.compress_of(elements) + self.transfer_seconds(cluster, elements)


def _price(cluster: Cluster, kind: str, nbytes: float) -> float:
    """Seconds of one ``kind`` collective to which every worker contributes ``nbytes``."""
    prices = {
        "all_reduce": cluster.all_reduce,
        "all_gather": cluster.all_gather,
        "broadcast": cluster.broadcast,
    }
    return prices[kind](nbytes)
