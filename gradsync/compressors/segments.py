"""Per-segment work over a flat tensor cut into contiguous segments (a group's tensors, DEFT's
layers), in a number of kernels that does not grow with the number of segments.

The flat tensor is read as rows of ``ROW`` elements. A row inside one segment is a *whole* row:
every whole row is reduced, or combined with its segment's value, by one kernel over a 2-d view.
The elements of the rows that cross a segment boundary, and of the last partial row, are
*loose*: at most ``ROW`` per boundary, gathered and handled by index. Which rows are whole and
where the loose elements lie is worked out once per layout (``segments``).

Sums add in another order than one reduction per segment does (rows of float32, the rows' results
in float64), so they agree with it to float rounding, not bit for bit; maxima and elementwise work
are exact.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cached_property
from typing import NamedTuple

import torch
from torch import Tensor

from gradsync.compressors.code_paths import cpu_branch, layout_cache
from gradsync.compressors.device_copy import on_device

ROW = 1024
"""Elements per row: long enough for a row reduction to run at memory speed, short enough that
rows crossing a boundary leave few loose elements."""

CPU_BLOCK_ROWS = 128
"""On a CPU, work of several passes runs this many rows at a time, so that the passes after the
first find the rows in cache; a GPU takes all rows in each kernel."""

ElementwiseOp = Callable[..., object]
"""``op(*inputs, *values, out=out)``: elementwise, writing ``out``; ``values`` broadcast."""


class SegmentTables(NamedTuple):
    """A layout's index tensors, for a kernel that takes tensors only (a ``torch.compile``d one
    cannot take the ``Segments`` itself without compiling again for every layout)."""

    ends: Tensor
    """Where each segment ends (its sizes' running sum): an element's segment is the number of
    ends at or below its index."""
    lengths: Tensor
    """Element count of every segment."""
    row_segment: Tensor
    """The segment of each whole row (of a crossing row: some segment; its loose elements are
    the ones that count)."""
    targets: Tensor
    """Where each row's partial result, then each loose element, adds: a crossing row into the
    extra slot ``count`` (dropped)."""
    loose: Tensor
    """The loose elements' indices."""


class Segments:
    """A flat tensor of ``sum(sizes)`` elements cut into segments of ``sizes``, in order."""

    def __init__(self, sizes: Sequence[int], device: torch.device) -> None:
        self.sizes = tuple(sizes)
        self.count = len(self.sizes)
        self.numel = sum(self.sizes)
        self.rows = self.numel // ROW
        row_segment, loose, loose_segment = _layout(self.sizes)
        dropped = torch.where(row_segment < 0, self.count, row_segment)
        # Reductions add a crossing row's partial result into slot ``count``, which is dropped.
        self._row_target = on_device(dropped, torch.int64, device)
        self._loose = on_device(loose, torch.int64, device)
        self._loose_target = on_device(loose_segment, torch.int64, device)
        # Spreading gives a crossing row any segment's value: its loose elements overwrite it.
        self._unit_source = on_device(
            torch.cat([row_segment.clamp(min=0), loose_segment]), torch.int64, device
        )
        self.lengths = on_device(self.sizes, torch.int64, device)
        """Element count of every segment."""
        step = CPU_BLOCK_ROWS if cpu_branch(device) else max(self.rows, 1)
        self._blocks = [slice(r, min(r + step, self.rows)) for r in range(0, self.rows, step)]

    @cached_property
    def tables(self) -> SegmentTables:
        """The layout as tensors (built on first use, once per layout)."""
        return SegmentTables(
            ends=self.lengths.cumsum(0),
            lengths=self.lengths,
            row_segment=self._unit_source[: self.rows],
            targets=torch.cat([self._row_target, self._loose_target]),
            loose=self._loose,
        )

    # ---- views --------------------------------------------------------------------------------
    def row_view(self, x: Tensor) -> Tensor:
        """``x``'s whole-row part as ``rows × ROW`` (crossing rows included)."""
        return x[: self.rows * ROW].view(self.rows, ROW)

    def loose_of(self, x: Tensor) -> Tensor:
        """``x``'s loose elements (a copy)."""
        return x.index_select(0, self._loose)

    def put_loose(self, out: Tensor, loose: Tensor) -> Tensor:
        """``out`` with its loose elements replaced by ``loose``."""
        return out.index_copy_(0, self._loose, loose)

    def spread(self, values: Tensor) -> tuple[Tensor, Tensor]:
        """One value per segment as (a ``rows × 1`` column for the rows, one per loose element)."""
        units = values.index_select(0, self._unit_source)
        return units[: self.rows].unsqueeze(1), units[self.rows :]

    # ---- reductions ---------------------------------------------------------------------------
    def _sum(self, rows: Tensor, loose: Tensor) -> Tensor:
        # Row results are added up in float64: a segment may hold thousands of rows.
        total = rows.new_zeros(self.count + 1, dtype=torch.float64)
        total.index_add_(0, self._row_target, rows.double())
        return total.index_add_(0, self._loose_target, loose.double())[: self.count]

    def sums(self, x: Tensor, loose: Tensor | None = None) -> Tensor:
        """Σ x over each segment, in float64 (``loose``: ``loose_of(x)``, when the caller has
        it)."""
        loose = self.loose_of(x) if loose is None else loose
        return self._sum(self.row_view(x).sum(dim=1), loose)

    def sums_of_squares(self, x: Tensor, centre: Tensor | None = None) -> Tensor:
        """Σ (x - c)² over each segment, c its value of ``centre`` (None: 0), in float64."""
        loose = self.loose_of(x)
        if centre is None:
            rows = torch.linalg.vector_norm(self.row_view(x), dim=1)  # no x² temporary
        else:
            row_centre, loose_centre = self.spread(centre)
            rows = x.new_empty(self.rows)
            for block in self._blocks:
                deviations = self.row_view(x)[block] - row_centre[block]
                torch.linalg.vector_norm(deviations, dim=1, out=rows[block])
            loose.sub_(loose_centre)
        return self._sum(rows.double().square_(), loose.double().square_())

    def sums_of_magnitudes(self, x: Tensor) -> Tensor:
        """Σ |x| over each segment, in float64."""
        rows = x.new_empty(self.rows)
        for block in self._blocks:
            _magnitude_sums(self.row_view(x)[block], out=rows[block])
        return self._sum(rows, self.loose_of(x).abs_())

    def max_magnitudes(self, x: Tensor) -> Tensor:
        """max |x| over each segment (0 for an empty one), exactly."""
        rows = x.new_empty(self.rows)
        for block in self._blocks:
            low, high = _extremes(self.row_view(x)[block])
            torch.maximum(high, low.neg_(), out=rows[block])
        total = x.new_zeros(self.count + 1)
        total.scatter_reduce_(0, self._row_target, rows, "amax")
        loose = self.loose_of(x).abs_()
        return total.scatter_reduce_(0, self._loose_target, loose, "amax")[: self.count]

    # ---- elementwise --------------------------------------------------------------------------
    def map(
        self,
        op: ElementwiseOp,
        inputs: Sequence[Tensor],
        values: Sequence[Tensor] = (),
        *,
        out: Tensor,
    ) -> Tensor:
        """``op(*inputs, *v, out=out)`` elementwise, each of ``values`` (one per segment) spread
        over its segment's elements as v; ``out`` may be one of ``inputs``, which ``op`` may
        overwrite."""
        loose_inputs = [self.loose_of(x) for x in inputs]  # before ``out`` overwrites them
        spread = [self.spread(v) for v in values]
        row_inputs, row_out = [self.row_view(x) for x in inputs], self.row_view(out)
        for block in self._blocks:
            row_values = [column[block] for column, _ in spread]
            op(*(x[block] for x in row_inputs), *row_values, out=row_out[block])
        loose_out = out.new_empty(self._loose.numel())
        op(*loose_inputs, *(loose for _, loose in spread), out=loose_out)
        return self.put_loose(out, loose_out)


def _magnitude_sums(rows: Tensor, *, out: Tensor) -> None:
    """Σ |x| of each row: one pass on a GPU (the order-1 norm); on a CPU, whose order-1 norm is
    several times slower than ``abs`` and ``sum``, two passes over rows in cache."""
    if cpu_branch(rows.device):
        torch.sum(rows.abs(), dim=1, out=out)
    else:
        torch.linalg.vector_norm(rows, ord=1, dim=1, out=out)


def _extremes(rows: Tensor) -> tuple[Tensor, Tensor]:
    """(min, max) of each row: one pass on a GPU; on a CPU, whose ``aminmax`` over rows is
    several times slower than ``amin`` and ``amax``, two passes over rows in cache."""
    if cpu_branch(rows.device):
        return rows.amin(dim=1), rows.amax(dim=1)
    low, high = torch.aminmax(rows, dim=1)
    return low, high


@layout_cache
def segments(sizes: tuple[int, ...], device: torch.device) -> Segments:
    """The layout of ``sizes`` on ``device``, built once (a group's sizes never change)."""
    return Segments(sizes, device)


def _layout(sizes: tuple[int, ...]) -> tuple[Tensor, Tensor, Tensor]:
    """(segment of each row, or -1 where a row crosses a boundary; the loose elements; their
    segments), as CPU tensors."""
    ends = torch.tensor(sizes, dtype=torch.int64).cumsum(0)
    numel = int(ends[-1]) if len(sizes) else 0
    rows = numel // ROW
    first = torch.arange(rows, dtype=torch.int64) * ROW
    # The segment holding element e is the first whose end lies past e (empty ones never do).
    first_segment = torch.searchsorted(ends, first, right=True)
    last_segment = torch.searchsorted(ends, first + ROW - 1, right=True)
    whole = first_segment == last_segment
    crossing = torch.nonzero(~whole).reshape(-1)
    loose = torch.cat(
        [
            (crossing.unsqueeze(1) * ROW + torch.arange(ROW)).reshape(-1),
            torch.arange(rows * ROW, numel, dtype=torch.int64),
        ]
    )
    row_segment = torch.where(whole, first_segment, -1)
    return row_segment, loose, torch.searchsorted(ends, loose, right=True)
