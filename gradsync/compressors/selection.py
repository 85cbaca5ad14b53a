"""Local index selection over a flat gradient: plain functions, no communication.

Shared by the sparsifiers (top-k over the whole model or per layer, hard threshold, DEFT's
selection inside its own layers) and by the selection-cost benchmark.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from gradsync.compressors.segmented_topk import density_topk
from gradsync.compressors.segments import segments
from gradsync.compressors.sparse import density_k


def topk_indices(flat: Tensor, k: int) -> Tensor:
    """Indices (int64) of the ``k`` largest-magnitude elements of ``flat``."""
    return torch.topk(flat.abs(), min(k, flat.numel()), sorted=False).indices


def layerwise_topk_indices(
    flat: Tensor, ranges: Sequence[tuple[int, int]], ks: Sequence[int]
) -> Tensor:
    """Top-``ks[j]`` inside each ``ranges[j] = (start, end)`` of ``flat``, as flat indices: the
    definition, one ``torch.topk`` per range, that ``SegmentedTopK`` and ``LayerwiseTopK``
    batch."""
    picks = [
        topk_indices(flat[start:end], k) + start for (start, end), k in zip(ranges, ks, strict=True)
    ]
    if not picks:
        return torch.empty(0, dtype=torch.int64, device=flat.device)
    return torch.cat(picks)


def tensor_ranges(sizes: Sequence[int]) -> list[tuple[int, int]]:
    """``[start, end)`` of each tensor of ``sizes`` inside their concatenation."""
    ranges, offset = [], 0
    for size in sizes:
        ranges.append((offset, offset + size))
        offset += size
    return ranges


def per_tensor_topk_indices(flat: Tensor, sizes: Sequence[int], density: float) -> Tensor:
    """Layer-wise top-k with ``k_l = max(1, int(density * n_l))`` in every tensor (sands-lab and
    OMGS "topk"), as flat indices, selected for all tensors at once (``segmented_topk.py``)."""
    return density_topk(tuple(sizes), density, flat.device).indices(flat)


def threshold_indices(flat: Tensor, threshold: float) -> Tensor:
    """Indices of every element with ``|x| >= threshold``, and of no other."""
    return torch.nonzero(flat.abs() >= threshold).reshape(-1)


def threshold_for_density(density: float, numel: int) -> float:
    """The hard-threshold heuristic λ = 1 / (2·sqrt(k)) with ``k = int(density * numel)``
    (ResNet-18, 11.2M parameters, density 0.001: λ = 4.73e-3)."""
    return 1.0 / (2.0 * math.sqrt(density_k(density, numel)))


def range_norms(flat: Tensor, ranges: Sequence[tuple[int, int]]) -> list[float]:
    """L2 norm of each of the contiguous ranges that tile ``flat``, in ``flat``'s type (summed in
    float64; one device sync for all, and a constant number of kernels)."""
    if not ranges:
        return []
    layout = segments(tuple(end - start for start, end in ranges), flat.device)
    norms: list[float] = layout.sums_of_squares(flat).sqrt_().to(flat.dtype).tolist()
    return norms
