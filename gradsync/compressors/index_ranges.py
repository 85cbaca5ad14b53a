"""Every index of many contiguous ranges, concatenated, in a constant number of kernels: each
range's shift spread over its elements (``repeat_interleave``), plus each element's place."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from gradsync.compressors.device_copy import on_device


def spread_ranges(
    shifts: Tensor, lengths: Tensor, total: int, positions: Tensor | None = None
) -> Tensor:
    """``cat(arange(p_j, p_j + lengths[j]) + shifts[j])`` with p_j the place where range j
    starts in the result (``total = sum(lengths)``, known on the host: no sync).
    ``positions``: ``arange(total)`` on the device, when the caller keeps one."""
    spread = torch.repeat_interleave(shifts, lengths, output_size=total)
    return spread.add_(
        torch.arange(total, device=shifts.device) if positions is None else positions
    )


def range_indices(starts: Sequence[int], lengths: Sequence[int], device: torch.device) -> Tensor:
    """Every index of the ranges ``[starts[j], starts[j] + lengths[j])``, range after range
    (int64)."""
    shifts, placed = [], 0
    for start, length in zip(starts, lengths, strict=True):
        shifts.append(start - placed)
        placed += length
    table = on_device([shifts, list(lengths)], torch.int64, device)
    return spread_ranges(table[0], table[1], placed)
