"""DEFT with one worker: every layer is the worker's, so nothing is exchanged, and on a GPU
nothing is read on the host either (docs/methods/compressors/deft.md, "One worker").

Each step: the layers' sums of squares (``segments.py``); the local k's and the selection's
layout from them in one operation (``deft_local_k.lone_plan``); every layer's top k_j in one
batched selection (``segmented_topk.SegmentedTopK``), whatever k_j the norms give, since each
layer may want up to ``min(size, k)``. A constant number of operations whatever the number of
layers, and the same index set as the host rule's.

The host learns how many indices there are only by reading the k's, so the result has the
length the host knows beforehand, ``deft_plan.local_k_bound``: at least Σ k_j, and exactly that
with ``exact_k`` whenever k covers every layer. The slots past Σ k_j repeat an index already
selected: its value is sent, and set, more than once, the same value each time; the density
logged counts them (at most one per layer, with the default rounding, unless caps cut the sum
below k).

On a CPU, where reading the norms costs no wait, the host rule sizes a per-layer selection
(``layer_topk.LayerwiseTopK``) to exactly Σ k_j, which is faster there.
"""

from __future__ import annotations

from itertools import accumulate

import torch
from torch import Tensor

from gradsync.algorithms.deft_plan import assign_local_k, local_k_bound
from gradsync.comm.host_sync import host_sync
from gradsync.compressors.code_paths import cpu_branch, latest_per_layout
from gradsync.compressors.deft_local_k import lone_plan
from gradsync.compressors.device_copy import on_device
from gradsync.compressors.index_ranges import range_indices, spread_ranges
from gradsync.compressors.layer_topk import LayerwiseTopK
from gradsync.compressors.segmented_topk import SegmentedTopK
from gradsync.compressors.segments import segments
from gradsync.compressors.selection import range_norms


class LoneSelection:
    """One worker's DEFT selection over the layers of ``lengths`` (in order, tiling the flat
    gradient) for ``k`` elements in all (``exact``: ``assign_local_k``'s mode)."""

    def __init__(self, lengths: tuple[int, ...], k: int, exact: bool, device: torch.device):
        self.lengths, self.k, self.exact = lengths, k, exact
        self.starts = [0, *accumulate(lengths)][:-1]
        self.numel = sum(lengths)
        self.total = local_k_bound(lengths, k, exact=exact)
        """How many indices a GPU's ``indices`` returns."""
        self.device = device
        self._on_device: _OnDevice | None = None

    def indices(self, flat: Tensor) -> Tensor:
        """Flat indices (int64) of every layer's largest k_j magnitudes."""
        if cpu_branch(flat.device):
            return self._on_host(flat)
        if self._on_device is None:
            self._on_device = _OnDevice(self, self.device)
        return self._on_device.indices(flat)

    def _on_host(self, flat: Tensor) -> Tensor:
        """The host rule from the norms read on the host, then each layer's top k_j."""
        ranges = [(start, start + n) for start, n in zip(self.starts, self.lengths, strict=True)]
        with host_sync("deft.norms"):  # on a CPU the norms are on the host already
            norms = range_norms(flat, ranges)
        ks = assign_local_k(norms, self.lengths, self.k, exact=self.exact)
        # Fully selected layers are every element: no top-k is needed there.
        whole = [j for j, k_j in enumerate(ks) if k_j == self.lengths[j]]
        some = [j for j, k_j in enumerate(ks) if k_j < self.lengths[j]]
        selection = LayerwiseTopK(
            [self.starts[j] for j in some],
            [self.lengths[j] for j in some],
            [ks[j] for j in some],
            numel=self.numel,
            device=flat.device,
        )
        picks = selection.indices(flat)
        if not whole:
            return picks
        starts, lengths = [self.starts[j] for j in whole], [self.lengths[j] for j in whole]
        return torch.cat([picks, range_indices(starts, lengths, flat.device)])


class _OnDevice:
    """What a GPU's selection keeps for a layout: the sums of squares' segments, the batched
    top-k's plan, where each layer's candidates start in its order, and the slots."""

    def __init__(self, lone: LoneSelection, device: torch.device) -> None:
        self.lone = lone
        self.segments = segments(lone.lengths, device)
        self.targets = self.segments.tables.targets
        self.zeros = torch.zeros(len(lone.lengths) + 1, dtype=torch.float64, device=device)
        caps = [min(n, lone.k) for n in lone.lengths]  # a layer may hold all of the norm
        self.plan = SegmentedTopK(lone.starts, lone.lengths, caps, numel=lone.numel, device=device)
        count = len(lone.lengths)
        # One pick per layer sits at each layer's first place.
        self.first = self.plan.places(torch.ones(count, dtype=torch.int64, device=device), count)
        self.sizes = on_device(lone.lengths, torch.int64, device)
        self.slots = torch.arange(lone.total, device=device)

    def indices(self, flat: Tensor) -> Tensor:
        lone = self.lone
        squares = self._sums_of_squares(flat)
        _, lengths, shifts, floor = lone_plan(
            squares, self.sizes, self.first, lone.k, lone.total, lone.exact, flat.dtype
        )
        # The padding run's places are negative: at the floor they are copies of a pick.
        places = spread_ranges(shifts, lengths, lone.total, self.slots).clamp_(min=floor)
        return self.plan.select(flat, places)

    def _sums_of_squares(self, flat: Tensor) -> Tensor:
        """Σ x² of every layer, then the crossing rows' dropped slot: ``Segments``' sums (so
        the norms are ``range_norms``', bit for bit on a CPU), with the rows' norms and the
        loose elements scattered in one pass, in that order."""
        rows = torch.linalg.vector_norm(self.segments.row_view(flat), dim=1)
        parts = torch.cat([rows, self.segments.loose_of(flat)]).double().square_()
        return self.zeros.index_add(0, self.targets, parts)


@latest_per_layout(varying=1)
def lone_selection(
    lengths: tuple[int, ...], k: int, exact: bool, device: torch.device
) -> LoneSelection:
    """The selection of a group's layers at one k, built once (a group's sizes never change;
    k changes only with the density's warm-up)."""
    return LoneSelection(lengths, k, exact, device)
