"""Top-k inside many layers of a flat tensor at once: a handful of ``torch.topk`` calls per step,
not one per layer (DEFT's selection; layer-wise top-k at a constant density on a CPU, where it
is faster than ``segmented_topk.py``'s constant number of kernels).

Layers are grouped into size classes: longest first, a layer joins the current class while it
is at least 7/8 of the class's longest (or the class's longest is small), so padding adds at
most an eighth to the work where it costs anything; and while its k is at least 3/4 of the
class's largest, since every row takes that k. A class's layers are copied into the rows of
one matrix as wide as its longest layer, each row a window of the flat tensor; the columns
outside the row's layer are set to -1, below every magnitude, so they are never selected (only
the band of columns where some row ends is masked). One ``torch.topk`` per class takes the
largest k of the class's layers in every row, sorted when some row wants fewer; each row then
keeps its first k_j. A class of one layer is a view of the flat tensor, with nothing copied.

The selected set is each layer's own top-k_j (ties aside); the order inside a layer is by
magnitude, or ``torch.topk``'s own where no row is cut short.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from gradsync.compressors.code_paths import cpu_branch
from gradsync.compressors.device_copy import on_device
from gradsync.compressors.index_ranges import spread_ranges

SMALL = 2048
"""Layers up to this many elements share one class however their lengths differ: padding them
costs less than a call of their own."""
FILL = 7 / 8
"""A longer layer joins a class whose longest it fills at least this much..."""
K_SHARE = 3 / 4
"""...and whose largest k it wants at least this share of: every row of a class takes that k,
which costs more the larger it is (on a CPU, about as its log)."""

_PADDING = -1.0  # below every magnitude

CPU_LOOP_BELOW = 1 << 18
"""On a CPU, layers of fewer elements than this in all take one ``torch.topk`` each: a call
there costs microseconds and no launch, less than building the classes (measured on the digits
CNN's 38,282 elements: 0.63 against 0.81 ms per DEFT step; on ResNet-18 the classes win)."""


@dataclass(frozen=True)
class _Class:
    rows: slice
    """The class's rows, in the plan's row order."""
    width: int
    k: int
    """The largest k of its rows: what ``torch.topk`` takes in every row."""
    cut: bool
    """Some row keeps fewer than ``k`` (so the top-k comes sorted, and the row keeps its first)."""
    ends_from: int
    """The first column where some row's layer ends (the width: none ends early)."""
    starts_to: int
    """The column up to which some row's layer starts late (0: none does). A window ends where
    its layer ends when one starting there would pass the end of the flat tensor."""


def size_classes(lengths: Sequence[int], ks: Sequence[int]) -> list[list[int]]:
    """Positions of the layers of ``lengths``, longest first, cut into classes whose members
    fill at least ``FILL`` of the class's longest (any, when that is at most ``SMALL``); a class
    of longer layers is cut again, largest k first, where a k falls below ``K_SHARE`` of the
    largest."""
    by_length: list[list[int]] = []
    width = 0
    for j in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        if by_length and (lengths[j] >= FILL * width or width <= SMALL):
            by_length[-1].append(j)
        else:
            by_length.append([j])
            width = lengths[j]
    classes: list[list[int]] = []
    for members in by_length:
        if lengths[members[0]] <= SMALL:
            classes.append(members)
            continue
        largest = 0
        for j in sorted(members, key=lambda i: (-ks[i], i)):
            if largest and ks[j] >= K_SHARE * largest:
                classes[-1].append(j)
            else:
                classes.append([j])
                largest = ks[j]
    return classes


class LayerwiseTopK:
    """The top ``ks[j]`` magnitudes inside each layer ``[starts[j], starts[j] + lengths[j])`` of
    a flat tensor of ``numel`` elements, for any tensor with that layout."""

    def __init__(
        self,
        starts: Sequence[int],
        lengths: Sequence[int],
        ks: Sequence[int],
        *,
        numel: int,
        device: torch.device,
    ) -> None:
        wanted = [j for j in range(len(lengths)) if min(ks[j], lengths[j]) > 0]
        picked = [min(ks[j], lengths[j]) for j in wanted]
        self.total = sum(picked)
        """How many indices ``indices`` returns."""
        self._loop: list[tuple[int, int, int]] | None = None
        """(start, end, k) of each layer, where one ``torch.topk`` per layer is cheaper."""
        if cpu_branch(device) and sum(lengths[j] for j in wanted) < CPU_LOOP_BELOW:
            layers = zip(wanted, picked, strict=True)
            self._loop = [(starts[j], starts[j] + lengths[j], k) for j, k in layers]
            return
        self._classes: list[_Class] = []
        base: list[int] = []
        low: list[int] = []
        high: list[int] = []
        row_k: list[int] = []
        for members in size_classes([lengths[j] for j in wanted], picked):
            width = max(lengths[wanted[m]] for m in members)
            first = len(base)
            for m in members:
                start, length = starts[wanted[m]], lengths[wanted[m]]
                window = start if start + width <= numel else start + length - width
                base.append(window)
                low.append(start - window)
                high.append(start - window + length)
                row_k.append(picked[m])
            rows = slice(first, len(base))
            self._classes.append(
                _Class(
                    rows=rows,
                    width=width,
                    k=max(row_k[rows]),
                    cut=min(row_k[rows]) < max(row_k[rows]),
                    ends_from=min(high[rows]),
                    starts_to=max(low[rows]),
                )
            )
        # Each row keeps the first k_j of its class's k picks: a range of the classes' picks
        # concatenated, shifted from where the row's picks lie there to where they go.
        offset, placed, shift = 0, 0, []
        for cls in self._classes:
            for r in range(cls.rows.start, cls.rows.stop):
                shift.append(offset + (r - cls.rows.start) * cls.k - placed)
                placed += row_k[r]
            offset += (cls.rows.stop - cls.rows.start) * cls.k
        self._cut = offset != self.total
        """Some row keeps fewer than its class's k."""
        self._host_base = base  # a class of one layer is sliced from the flat tensor by it
        table = on_device([base, low, high, row_k, shift], torch.int64, device)
        self._base, self._low, self._high, self._row_k, self._shift = table.unbind(0)

    def indices(self, flat: Tensor) -> Tensor:
        """Flat indices (int64) of every layer's largest ``ks[j]`` magnitudes, layer after layer
        in the plan's order (``flat``: a contiguous 1-d tensor)."""
        if self._loop is not None:
            return _one_topk_per_layer(flat, self._loop)
        picks = [self._class_indices(flat, cls) for cls in self._classes]
        if not picks:
            return torch.empty(0, dtype=torch.int64, device=flat.device)
        candidates = torch.cat(picks) if len(picks) > 1 else picks[0]
        if not self._cut:
            return candidates
        return candidates.index_select(0, spread_ranges(self._shift, self._row_k, self.total))

    def _class_indices(self, flat: Tensor, cls: _Class) -> Tensor:
        base = self._base[cls.rows]
        if cls.rows.stop - cls.rows.start == 1:  # one layer, as wide as its class: a view
            start = self._host_base[cls.rows.start]
            rows = flat[start : start + cls.width].abs().unsqueeze(0)
        else:
            # Every window of the class's width, as a view; the class's rows are copied out.
            windows = flat.unfold(0, cls.width, 1)
            rows = windows.index_select(0, base).abs_()
            self._mask_outside(rows, cls)
        local = torch.topk(rows, cls.k, dim=1, sorted=cls.cut).indices
        return local.add_(base.unsqueeze(1)).reshape(-1)

    def _mask_outside(self, rows: Tensor, cls: _Class) -> None:
        """Set the columns of each row outside its layer to ``_PADDING``, looking only at the
        bands of columns where some row's layer ends early or starts late."""
        if cls.ends_from < cls.width:
            columns = torch.arange(cls.ends_from, cls.width, device=rows.device)
            ended = columns >= self._high[cls.rows].unsqueeze(1)
            rows[:, cls.ends_from :].masked_fill_(ended, _PADDING)
        if cls.starts_to > 0:
            columns = torch.arange(cls.starts_to, device=rows.device)
            not_started = columns < self._low[cls.rows].unsqueeze(1)
            rows[:, : cls.starts_to].masked_fill_(not_started, _PADDING)


def _one_topk_per_layer(flat: Tensor, layers: Sequence[tuple[int, int, int]]) -> Tensor:
    """The definition: ``torch.topk`` of each layer ``(start, end, k)``, as flat indices."""
    if not layers:
        return torch.empty(0, dtype=torch.int64, device=flat.device)
    picks = [flat[s:e].abs().topk(k, sorted=False).indices.add_(s) for s, e, k in layers]
    return torch.cat(picks)
