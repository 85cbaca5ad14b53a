"""``Segments``' per-segment work written on a layout's tables (``SegmentTables``), for functions
that ``torch.compile`` fuses (``fused.py``).

A reduction is a row reduction over the whole rows, then one scatter of the rows' partial
results and the loose elements into one slot per segment: on a GPU, a kernel that reads the
tensor once and one small scatter. A per-segment value reaches an element through the element's
segment, found by a binary search of its index in the segments' ends: computed in registers
inside the kernel that uses it, never stored per element.

The methods take the names of ``Segments``' (``sums``, ``sums_of_squares``, ...), so a method's
statistics are written once and run on either: eagerly on ``Segments`` on a CPU, compiled on
``FusedSegments`` on a GPU's route. Sums add in another order than ``Segments`` (each row in the
input's dtype, then in float64); maxima are exact.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gradsync.compressors.segments import ROW, Segments, SegmentTables

Layout = Segments | SegmentTables
"""A layout as a CPU's route passes it (``Segments``) or a GPU's (its tables, to a compiled
function)."""


def reductions(layout: Layout) -> Segments | FusedSegments:
    """The per-segment reductions of ``layout``: ``Segments``' own, or ``FusedSegments``'."""
    return layout if isinstance(layout, Segments) else FusedSegments(layout)


def segment_of(index: Tensor, ends: Tensor) -> Tensor:
    """The segment of each element ``index`` (int64), of segments ending at ``ends``."""
    return torch.bucketize(index, ends, right=True)


class FusedSegments:
    """The layout of ``tables``; made inside a compiled function, so it holds tensors only."""

    def __init__(self, tables: SegmentTables) -> None:
        self.tables = tables
        self.lengths = tables.lengths
        """Element count of every segment."""
        self.count = tables.lengths.numel()
        self.rows = tables.row_segment.numel()

    # ---- reductions ---------------------------------------------------------------------------
    def sums(self, x: Tensor) -> Tensor:
        """Σ x over each segment, in float64."""
        return self._total(self._row_view(x).sum(dim=1), self._loose(x))

    def sums_of_squares(self, x: Tensor, centre: Tensor | None = None) -> Tensor:
        """Σ (x - c)² over each segment, c its value of ``centre`` (None: 0), in float64."""
        rows, loose = self._row_view(x), self._loose(x)
        if centre is not None:
            rows = rows - centre[self.tables.row_segment].unsqueeze(1)
            loose = loose - centre[self._loose_segment()]
        return self._total(rows.square().sum(dim=1), loose.square())

    def sums_of_magnitudes(self, x: Tensor) -> Tensor:
        """Σ |x| over each segment, in float64."""
        return self._total(self._row_view(x).abs().sum(dim=1), self._loose(x).abs())

    def max_magnitudes(self, x: Tensor) -> Tensor:
        """max |x| over each segment (0 for an empty one), exactly."""
        parts = torch.cat([self._row_view(x).abs().amax(dim=1), self._loose(x).abs()])
        # Inductor leaves a scatter of maxima to ATen: on a GPU one more kernel, outside the
        # ones it generates (and counts).
        total = parts.new_zeros(self.count + 1)
        total.scatter_reduce_(0, self.tables.targets, parts, "amax")
        return total[: self.count]

    # ---- parts --------------------------------------------------------------------------------
    def _row_view(self, x: Tensor) -> Tensor:
        return x[: self.rows * ROW].view(self.rows, ROW)

    def _loose(self, x: Tensor) -> Tensor:
        return x[self.tables.loose]

    def _loose_segment(self) -> Tensor:
        return self.tables.targets[self.rows :]

    def _total(self, rows: Tensor, loose: Tensor) -> Tensor:
        parts = torch.cat([rows, loose]).double()
        total = parts.new_zeros(self.count + 1)
        total.index_add_(0, self.tables.targets, parts)
        return total[: self.count]
