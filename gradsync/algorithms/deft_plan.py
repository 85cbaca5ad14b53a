"""DEFT's planning, as plain functions (docs/methods/compressors/deft.md, "How it works"): which
worker selects how much of what.

* ``partition_layers``: two-stage partitioning of the flattened gradient into candidate layers.
* ``assign_local_k``: norm-proportional local k per layer (floor rounding, at least 1, at most
  the layer's size; optionally summing to exactly k, where a layer with a zero norm may get 0);
  ``local_k_bound``: the most their sum can be, known before the norms.
* ``lpt_bins``: longest-processing-time bin packing of layers onto workers by selection cost,
  with fully selected ("common") layers kept out of the bins.
* ``bin_for_rank``: which bin a worker takes at a step (the mapping rotates with the decision
  worker).

No process group is needed: the compressor that wraps these broadcasts the decision worker's
bins and runs the selection.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def partition_layers(sizes: Sequence[int], num_workers: int) -> list[tuple[int, int]]:
    """Contiguous ``[start, end)`` ranges over the concatenation of tensors of ``sizes``.

    Stage 1 takes each tensor as a layer; stage 2 cuts any tensor larger than ``n_g / n`` into
    exactly ``n`` contiguous pieces, the first ``size % n`` of them one element longer.
    """
    if num_workers < 1:
        raise ValueError(f"num_workers must be >= 1, got {num_workers}")
    threshold = sum(sizes) / num_workers
    ranges: list[tuple[int, int]] = []
    offset = 0
    for size in sizes:
        if size > threshold and num_workers > 1:
            base, extra = divmod(size, num_workers)
            start = offset
            for piece in range(num_workers):
                length = base + (1 if piece < extra else 0)
                if length:
                    ranges.append((start, start + length))
                start += length
        elif size > 0:
            ranges.append((offset, offset + size))
        offset += size
    return ranges


def assign_local_k(
    norms: Sequence[float], sizes: Sequence[int], k: int, *, exact: bool = False
) -> list[int]:
    """k_j for every layer, proportional to its gradient norm; k_j <= sizes[j].

    Layers are visited by norm, largest first (ties: higher index first, as the authors' code
    sorts). Default mode follows that code: floor rounding with a running remainder and every
    layer at least 1, so the sum may pass k by the layers forced up to 1 (see
    docs/methods/compressors/deft.md).
    ``exact`` makes the sum k whenever k >= the number of layers with a non-zero norm: see
    ``_exact_local_k``.

    Every sum of norms is taken in float64 from the smallest norm up, one addition at a time:
    an order a device repeats bit for bit (``compressors/deft_local_k.py``), and exact (so
    equal to any other order) whenever the norms' sum fits float64's 53 bits.
    """
    if len(norms) != len(sizes):
        raise ValueError("norms and sizes must have the same length")
    order = sorted(range(len(norms)), key=lambda j: (norms[j], j), reverse=True)
    if exact:
        return _exact_local_k(norms, sizes, k, order)
    ks = [0] * len(norms)
    k_rem = k
    norm_rem = 0.0
    for j in reversed(order):
        norm_rem += norms[j]
    for j in order:
        share = math.floor(k_rem * norms[j] / norm_rem) if norm_rem > 0 else 0
        ks[j] = min(sizes[j], max(1, share))
        k_rem -= ks[j]
        norm_rem -= norms[j]
    return ks


def _exact_local_k(
    norms: Sequence[float], sizes: Sequence[int], k: int, order: Sequence[int]
) -> list[int]:
    """The reference rounding, kept to the sum k by two bounds on each layer's share.

    Every layer's floor is one element, except that when k cannot cover one per layer, the
    layers with a zero norm (nothing to select) have none. While layer j is assigned, one
    floor is held back for each layer still to come (so tail layers forced up to their floor
    cannot push the sum past k), and j takes at least what the later layers cannot hold (so
    caps at the tail cannot leave the sum short). The remaining norm is summed afresh from the
    smallest layer up, so the last layer with a non-zero norm gets exactly what is left.
    """
    count = len(order)
    floors = [1 if norms[j] > 0 or k >= count else 0 for j in range(count)]
    # Suffix sums over the visiting order: norm, floors and room of the layers from p on.
    norm_from, floor_from, room_from = [0.0] * (count + 1), [0] * (count + 1), [0] * (count + 1)
    for p in range(count - 1, -1, -1):
        j = order[p]
        norm_from[p] = norm_from[p + 1] + norms[j]
        floor_from[p] = floor_from[p + 1] + floors[j]
        room_from[p] = room_from[p + 1] + sizes[j]
    ks = [0] * count
    k_rem = min(k, room_from[0])  # no layer can give more than all of its elements
    for p, j in enumerate(order):
        share = math.floor(k_rem * norms[j] / norm_from[p]) if norm_from[p] > 0 else 0
        low = min(sizes[j], max(floors[j], k_rem - room_from[p + 1]))
        high = min(sizes[j], k_rem - floor_from[p + 1])
        ks[j] = max(low, min(high, share))
        k_rem -= ks[j]
    return ks


def local_k_bound(sizes: Sequence[int], k: int, *, exact: bool = False) -> int:
    """The most elements ``assign_local_k`` gives all layers together, whatever their norms:
    the length of a selection sized before the norms are read.

    ``exact`` with k covering every layer gives exactly ``min(k, Σ sizes)``. Otherwise the
    sum passes k by at most one element per layer forced up to its floor (while the running
    norm sums are exact in float64, so that no share exceeds what is left of k); and no
    layer gives more than all of its elements.
    """
    numel, count = sum(sizes), len(sizes)
    if exact and k >= count:
        return min(k, numel)
    return min(numel, k + count)


def selection_cost(size: int, k: int) -> float:
    """Cost of a top-k over ``size`` elements, as the authors' code models it: n·log2(k)."""
    return size * math.log2(k) if k > 1 else float(size)


@dataclass(frozen=True)
class BinPlan:
    bins: list[list[int]]
    """Layer indices per bin, in the order they were placed."""
    common: list[int]
    """Fully selected layers (k_j == size): every worker sends all of their elements."""
    loads: list[float]
    """Summed selection cost per bin."""


def lpt_bins(sizes: Sequence[int], ks: Sequence[int], num_workers: int) -> BinPlan:
    """Longest-processing-time-first packing of layers into ``num_workers`` bins.

    The costliest unassigned layer (ties: lowest index) goes to the least loaded bin (ties:
    lowest bin). LPT's makespan is within (4/3 - 1/(3n)) of the optimum.
    """
    common = [j for j in range(len(sizes)) if ks[j] == sizes[j]]
    costs = {j: selection_cost(sizes[j], ks[j]) for j in range(len(sizes)) if j not in common}
    bins: list[list[int]] = [[] for _ in range(num_workers)]
    loads = [0.0] * num_workers
    for j in sorted(costs, key=lambda i: (-costs[i], i)):
        target = min(range(num_workers), key=lambda b: (loads[b], b))
        bins[target].append(j)
        loads[target] += costs[j]
    return BinPlan(bins=bins, common=common, loads=loads)


def decision_worker(step: int, num_workers: int) -> int:
    """The worker that packs the bins at ``step`` (cyclic, so the work rotates)."""
    return step % num_workers


def bin_for_rank(rank: int, step: int, num_workers: int) -> int:
    """The bin worker ``rank`` selects from at ``step``; the mapping rotates with the decider."""
    return (decision_worker(step, num_workers) + rank) % num_workers


def encode_plan(plan: BinPlan) -> list[int]:
    """The decision worker's plan as one integer vector of fixed length n + L: the bin sizes,
    then every bin's layers, then the common layers (their count is what is left)."""
    flat_bins = [j for layers in plan.bins for j in layers]
    return [len(layers) for layers in plan.bins] + flat_bins + list(plan.common)


def decode_plan(values: Sequence[int], num_workers: int) -> tuple[list[list[int]], list[int]]:
    """Bins and common layers from ``encode_plan``'s vector."""
    counts, rest = list(values[:num_workers]), list(values[num_workers:])
    bins, offset = [], 0
    for count in counts:
        bins.append(rest[offset : offset + count])
        offset += count
    return bins, rest[offset:]
