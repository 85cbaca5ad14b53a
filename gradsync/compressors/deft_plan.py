"""DEFT's planning, as plain functions (SPECS §1.2-1.4): which worker selects how much of what.

* ``partition_layers``: two-stage partitioning of the flattened gradient into candidate layers.
* ``assign_local_k``: norm-proportional local k per layer (floor rounding, at least 1, at most
  the layer's size; optionally exact).
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
    """k_j for every layer, proportional to its gradient norm; 1 <= k_j <= sizes[j].

    Layers are visited by norm, largest first (ties: higher index first, as the authors' code
    sorts). Default mode follows that code: floor rounding with a running remainder, so the sum
    may miss k by the layers forced up to 1. ``exact`` recomputes the remaining norm exactly and
    gives the last layer what is left, so the sum is k whenever k >= number of layers.
    """
    if len(norms) != len(sizes):
        raise ValueError("norms and sizes must have the same length")
    order = sorted(range(len(norms)), key=lambda j: (norms[j], j), reverse=True)
    ks = [0] * len(norms)
    k_rem = k
    norm_rem = math.fsum(norms)
    for position, j in enumerate(order):
        if exact:
            norm_rem = math.fsum(norms[i] for i in order[position:])
        last = position == len(order) - 1
        if exact and last:
            share = k_rem
        else:
            share = math.floor(k_rem * norms[j] / norm_rem) if norm_rem > 0 else 0
        ks[j] = min(sizes[j], max(1, share))
        k_rem -= ks[j]
        norm_rem -= norms[j]
    return ks


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
