"""A lone DEFT worker's plan, computed where the gradient is: no host round trip.

With one worker every layer is the worker's, so the plan is the local k of every layer
(``algorithms/deft_plan.assign_local_k``, from the layers' norms) and where the selection puts
each layer's picks. ``lone_plan`` is one operation, ``gradsync::deft_lone_plan``: on a GPU one
Triton program (``deft_local_k_triton.py``), elsewhere the definition below, the host rule on
the host's copy of the norms. Either way it is one operation whatever the number of layers.

The selection (``segmented_topk.SegmentedTopK``) sorts every layer's candidates by layer, then
magnitude, so layer j's top k_j are the places ``first[j] ... first[j] + k_j - 1`` of that
order. Its result has a length the host knows before the norms are read (``total``, at least
the sum of the k's: ``deft_plan.local_k_bound``), laid out as runs of consecutive places:

* first a padding run of ``total - Σ k_j`` slots, whose places are negative, so that clamping
  every place at the lowest place of a pick (``floor``) turns them into copies of that pick;
* then every layer's k_j places, layer after layer.

``spread_ranges(shifts, lengths, total)`` (``index_ranges.py``) spreads the runs into places.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from gradsync.algorithms.deft_plan import assign_local_k

Runs = tuple[list[int], list[int], int]
"""(run lengths, run shifts, floor): a lone worker's selection as ``lone_plan`` lays it out."""


def selection_runs(ks: Sequence[int], first: Sequence[int], total: int) -> Runs:
    """The runs of ``total`` slots for layers that pick ``ks`` from places starting at
    ``first``: a padding run, then each layer's (cut where ``total`` slots are filled, which the
    bound prevents while float64 sums of the norms are exact)."""
    pad = max(total - sum(ks), 0)
    lengths, shifts = [pad], [-pad]
    slot, lowest = pad, -1
    for k_j, start in zip(ks, first, strict=True):
        length = min(k_j, total - slot)
        lengths.append(length)
        shifts.append(start - slot)
        if lowest < 0 and length > 0:
            lowest = start
        slot += length
    return lengths, shifts, max(lowest, 0)


@torch.library.custom_op("gradsync::deft_lone_plan", mutates_args=())
def lone_plan(
    squares: Tensor,
    sizes: Tensor,
    first: Tensor,
    k: int,
    total: int,
    exact: bool,
    dtype: torch.dtype,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(every layer's k, the runs' lengths, their shifts, the floor), int64 on ``squares``'
    device, from every layer's sum of squares (float64, in the first of its entries, one per
    layer of ``sizes``; a layer's norm is the square root in the gradient's ``dtype``, as
    ``selection.range_norms`` gives it), sizes and first places, for ``k`` elements
    (``exact``: ``assign_local_k``'s mode) and ``total`` slots.

    The definition, run on the host: the rule and ``selection_runs`` on the host's values. Its
    reads are no waits: only tensors off a GPU come here, a CUDA tensor takes the Triton
    kernel registered below."""
    norms = squares[: sizes.numel()].sqrt().to(dtype).tolist()
    ks = assign_local_k(norms, sizes.tolist(), k, exact=exact)
    lengths, shifts, floor = selection_runs(ks, first.tolist(), total)
    ks_, lengths_, shifts_, floor_ = (
        torch.tensor(values, dtype=torch.int64, device=squares.device)
        for values in (ks, lengths, shifts, [floor])
    )
    return ks_, lengths_, shifts_, floor_


@lone_plan.register_kernel("cuda")
def _lone_plan_on_a_gpu(*args: Any) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """One Triton program, with ``lone_plan``'s arguments."""
    # Deferred for start-up: Triton comes with CUDA builds of torch, CPU-only ones need not
    # have it, and importing it takes seconds.
    from gradsync.compressors.deft_local_k_triton import lone_plan_program

    return lone_plan_program(*args)
