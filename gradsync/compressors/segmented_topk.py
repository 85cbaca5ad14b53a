"""Exact top-k inside every segment of a flat tensor, all segments at once, in a number of
kernels that depends neither on how many segments there are nor on how long they are.

Segment j is ``[starts[j], starts[j] + lengths[j])`` of the flat tensor and wants its ``k_j``
largest magnitudes. The k's are a device tensor (they may be computed on the device, as DEFT's
are); the host knows their total and a bound on each (``caps``), so that every size is known
without reading the device.

1. Rows. A segment of at least ``W`` elements is read as rows of ``W``, each a window of the
   flat tensor: the last row ends where the segment ends, and its columns that the row before
   already holds are set to -1, below every magnitude. One ``torch.topk`` takes the largest
   ``c = min(W, max cap)`` of every row. A row holds at most ``min(W, k_j)`` of its segment's
   top k_j, and ``c`` is at least that, so the rows' picks hold every segment's top k_j. A
   segment shorter than ``W`` goes to stage 2 whole.
2. Candidates. Every candidate (a pick, or an element of a short segment) gets one integer key:
   its segment's number, then its magnitude's bits, largest first (a non-negative float's bits
   order as its value). One sort of the keys groups the candidates by segment, largest first;
   segment j's top k_j are its first k_j there, a range that starts where its candidates start
   (known from the layout) and is written where the k's prefix sum says.

The result is exactly ``total`` indices, segment after segment: no size depends on the data and
nothing is read on the host. Ties inside a segment are broken arbitrarily, as ``torch.topk``
breaks them; inside a segment the order is by magnitude, largest first.

``W`` is chosen per layout among powers of two, for the least estimated work: a row element
costs about what ``torch.topk`` costs per element, a sorted candidate ``SORT_COST`` times more.
At the usual densities (0.001 to 0.01) on ResNet-18's or ResNet-50's tensors this sorts 4 to 20%
of the elements; at DGC's warm-up densities (0.25) rows would keep most of a segment, and every
element is sorted. float64 magnitudes have too many bits to share a key with the segment: they
are sorted twice (by magnitude, then stably by segment).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

import torch
from torch import Tensor

from gradsync.compressors.code_paths import cpu_branch, latest_per_layout
from gradsync.compressors.device_copy import on_device
from gradsync.compressors.fused import fused
from gradsync.compressors.index_ranges import range_indices, spread_ranges
from gradsync.compressors.layer_topk import LayerwiseTopK
from gradsync.compressors.sparse import density_k

SORT_COST = 6
"""Estimated cost of sorting one candidate (a 64-bit key and its place, radix-sorted), in units
of one element of a row's top-k. An estimate, to be checked on a GPU."""
WIDTHS = tuple(1 << p for p in range(10, 25))
"""The row widths tried: wide enough that a row's picks are few, up to 16M."""

_PADDING = -1.0  # below every magnitude, so a masked column is never picked before an element
_SEGMENT_SHIFT = 33
"""A key is ``segment << 33`` plus ``2**31 - 1`` minus the magnitude's signed bits: the bits of a
magnitude (at most 32 of them) and of the padding (negative) both stay inside their segment."""
_BITS = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}
"""The integer type of the same width, whose order a non-negative float's bits follow."""


def choose_width(lengths: Sequence[int], caps: Sequence[int]) -> int:
    """The row width ``W`` of least estimated work for segments of ``lengths`` that want at
    most ``caps`` elements each (0: no rows, every wanted element is sorted). A width that
    makes exactly one row is passed over: see ``SegmentedTopK``'s plan of rows."""
    wanted = [(n, min(cap, n)) for n, cap in zip(lengths, caps, strict=True) if min(cap, n) > 0]
    best, least = 0, SORT_COST * sum(n for n, _ in wanted)
    for width in WIDTHS:
        long = [(n, cap) for n, cap in wanted if n >= width]
        rows = sum(-(-n // width) for n, _ in long)
        if rows < 2:
            break
        picks = min(width, max(cap for _, cap in long))
        short = sum(n for n, _ in wanted if n < width)
        cost = rows * width + SORT_COST * (rows * picks + short)
        if cost < least:
            best, least = width, cost
    return best


class SegmentedTopK:
    """The top ``ks[j]`` magnitudes inside each segment ``[starts[j], starts[j] + lengths[j])``
    of a flat tensor of ``numel`` elements, for any k's with ``0 <= ks[j] <= caps[j]`` and
    ``ks[j] <= lengths[j]`` (neither is checked: that would read the k's on the host): a plan
    made once per layout and reused for every tensor and k's."""

    def __init__(
        self,
        starts: Sequence[int],
        lengths: Sequence[int],
        caps: Sequence[int],
        *,
        numel: int,
        device: torch.device,
    ) -> None:
        if any(start < 0 or start + n > numel for start, n in zip(starts, lengths, strict=True)):
            raise ValueError(f"a segment lies outside the flat tensor of {numel} elements")
        caps = [max(0, min(cap, n)) for cap, n in zip(caps, lengths, strict=True)]
        width = choose_width(lengths, caps)
        long = [j for j in range(len(lengths)) if caps[j] and 0 < width <= lengths[j]]
        short = [j for j in range(len(lengths)) if caps[j] and j not in set(long)]
        self.picks = min(width, max(caps[j] for j in long)) if long else 0
        """How many each row's ``torch.topk`` takes (``c``)."""
        base, low, row_segment = _rows([starts[j] for j in long], [lengths[j] for j in long], width)
        row_segment = [long[r] for r in row_segment]
        if not base:
            # Two rows of two elements, of which none is taken: the fused kernel then meets no
            # size of 0 or 1 (a compile would fix it, and compile again for every other).
            width = min(2, numel)
            base, low = [0, 0], [0, 0]
        self.width = width
        self.candidates = len(row_segment) * self.picks + sum(lengths[j] for j in short)
        """How many candidates are sorted."""
        per_segment = [0] * len(lengths)
        for j in row_segment:
            per_segment[j] += self.picks
        for j in short:
            per_segment[j] = lengths[j]
        # The candidates come as runs of one segment: each long segment's rows' picks, in
        # order, then each short segment's elements. Their keys are spread from the runs' at
        # each call, rather than kept, one per candidate, for as long as the plan is.
        runs = [(j, self.picks * row_segment.count(j)) for j in long]
        runs += [(j, lengths[j]) for j in short]
        self._run_keys = on_device(
            [(j << _SEGMENT_SHIFT) + 2**31 - 1 for j, _ in runs], torch.int64, device
        )
        self._run_lengths = on_device([n for _, n in runs], torch.int64, device)
        table = on_device([base, low], torch.int64, device)
        self._base, self._low = table[0], table[1].unsqueeze(1)
        self._band = torch.arange(min(max(max(low), 2), width), device=device)
        self._columns = torch.arange(width, device=device)
        self._first = on_device([0, *accumulate(per_segment)][:-1], torch.int64, device)
        self._loose = range_indices([starts[j] for j in short], [lengths[j] for j in short], device)

    def indices(self, flat: Tensor, ks: Tensor, total: int) -> Tensor:
        """Flat indices (int64) of segment j's ``ks[j]`` largest magnitudes, segment after
        segment (``flat``: a contiguous 1-d tensor; ``ks``: int64 on its device, summing to
        ``total``)."""
        return self.select(flat, self.places(ks, total))

    def places(self, ks: Tensor, total: int) -> Tensor:
        """Where each of the ``total`` picks lies among the candidates sorted by segment, then
        magnitude: segment j's first ``ks[j]``. The same for every tensor of the layout."""
        ends = ks.cumsum(0)
        return spread_ranges(self._first.add(ks).sub_(ends), ks, total)

    def select(self, flat: Tensor, places: Tensor) -> Tensor:
        """The flat indices at ``places`` (``places(ks, total)``) among ``flat``'s candidates."""
        rows = row_magnitudes(flat, self._base, self._low, self._band, self._columns)
        top = torch.topk(rows, self.picks, dim=1, sorted=False)
        magnitudes = torch.cat([top.values.view(-1), flat.index_select(0, self._loose).abs_()])
        chosen = self._order(magnitudes).index_select(0, places)
        where = torch.cat([top.indices.add_(self._base.unsqueeze(1)).view(-1), self._loose])
        return where.index_select(0, chosen)

    def _order(self, magnitudes: Tensor) -> Tensor:
        """The candidates' places, by segment, then by magnitude largest first."""
        keys = torch.repeat_interleave(
            self._run_keys, self._run_lengths, output_size=self.candidates
        )
        bits = _BITS.get(magnitudes.dtype)
        if bits is not None:
            return torch.sort(keys.sub_(magnitudes.view(bits))).indices
        by_magnitude = torch.sort(magnitudes, descending=True, stable=True).indices
        segment = (keys >> _SEGMENT_SHIFT).index_select(0, by_magnitude)
        return by_magnitude.index_select(0, torch.sort(segment, stable=True).indices)


def _rows(
    starts: Sequence[int], lengths: Sequence[int], width: int
) -> tuple[list[int], list[int], list[int]]:
    """Rows of ``width`` over segments at least as long: (where each starts in the flat tensor,
    how many of its first columns the row before holds, whose segment it is, by place in
    ``starts``). A segment's last row ends where the segment ends."""
    base: list[int] = []
    low: list[int] = []
    segment: list[int] = []
    for j, (start, n) in enumerate(zip(starts, lengths, strict=True)):
        full, rest = divmod(n, width)
        base += [start + i * width for i in range(full)]
        low += [0] * full
        if rest:
            base.append(start + n - width)
            low.append(width - rest)
        segment += [j] * (full + (rest > 0))
    return base, low, segment


@fused
def row_magnitudes(
    flat: Tensor, base: Tensor, low: Tensor, band: Tensor, columns: Tensor
) -> Tensor:
    """|flat| in rows that start at ``base``, ``columns`` (0, 1, ...) wide; a row's columns
    below its ``low`` (a column of them) are padding, looked for only in the ``band`` of columns
    where any is."""
    if cpu_branch(flat.device):  # rows copied from windows, without an index per element
        rows = flat.unfold(0, columns.numel(), 1).index_select(0, base).abs_()
    else:  # one gather: a compile keeps its width free, where unfold would fix it
        rows = flat[base.unsqueeze(1) + columns].abs_()
    rows[:, : band.numel()].masked_fill_(band < low, _PADDING)
    return rows


class FixedTopK:
    """``SegmentedTopK`` for k's the host knows (a constant density): the places of the picks
    are worked out once. On a CPU, where a ``torch.topk`` per layer or per class of layers costs
    a third of the rows' wide top-k and sort (ResNet-18's gradient at density 0.001: 50 against
    160 ms), ``LayerwiseTopK`` selects, in its own order of the segments."""

    def __init__(
        self,
        starts: Sequence[int],
        lengths: Sequence[int],
        ks: Sequence[int],
        *,
        numel: int,
        device: torch.device,
    ) -> None:
        ks = [max(0, min(k, n)) for k, n in zip(ks, lengths, strict=True)]
        self.total = sum(ks)
        """How many indices ``indices`` returns."""
        self._layerwise: LayerwiseTopK | None = None
        if cpu_branch(device):
            self._layerwise = LayerwiseTopK(starts, lengths, ks, numel=numel, device=device)
            return
        self._plan = SegmentedTopK(starts, lengths, ks, numel=numel, device=device)
        self._places = self._plan.places(on_device(ks, torch.int64, device), self.total)

    def indices(self, flat: Tensor) -> Tensor:
        """Flat indices (int64) of every segment's largest ``ks[j]`` magnitudes, segment after
        segment (on a CPU, in ``LayerwiseTopK``'s order of the segments)."""
        if self._layerwise is not None:
            return self._layerwise.indices(flat)
        return self._plan.select(flat, self._places)


@latest_per_layout(varying=1)
def density_topk(sizes: tuple[int, ...], density: float, device: torch.device) -> FixedTopK:
    """Top ``k_l = max(1, int(density * n_l))`` in every tensor of ``sizes``, laid end to end
    (layer-wise top-k at a constant density), built once per layout."""
    starts = [0, *accumulate(sizes)][:-1]
    ks = [density_k(density, n) for n in sizes]
    return FixedTopK(starts, sizes, ks, numel=sum(sizes), device=device)
