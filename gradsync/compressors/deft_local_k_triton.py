"""A lone DEFT worker's plan (``deft_local_k.lone_plan``) as one Triton program on a GPU.

The local k rule (``algorithms/deft_plan.assign_local_k``) is a recurrence: each layer's share
depends on what the layers before it took, so no parallel formula gives it, and a parallel
scan would take a round of launches per doubling. One program does it all, in three passes:

1. the layers' norms from their sums of squares, rounded as torch rounds them, and their ranks
   (smallest first, ties in layer order), every lane counting the norms below its own;
2. the rule, walking the layers in rank order with the host rule's float64 operations in the
   host rule's order (sums of norms from the smallest up; floor(k_rem · norm / norm_rem)
   bounded as the rule bounds it);
3. the selection's runs, walking the layers in order (``deft_local_k.selection_runs``).

Hundreds of layers take microseconds. Imported only where a CUDA device runs it (Triton comes
with CUDA builds of torch); the tests run it under ``TRITON_INTERPRET=1`` on a CPU against the
definition, and compile it for a GPU.
"""

# mypy: disable-error-code="untyped-decorator, no-untyped-def"
# (Triton's kernels take untyped arguments: their types are the launch's.)

from __future__ import annotations

import contextlib

import torch

# CUDA builds of torch bring Triton (untyped); a CPU-only one never imports this module.
import triton  # type: ignore[import-untyped, import-not-found, unused-ignore]
import triton.language as tl  # type: ignore[import-untyped, import-not-found, unused-ignore]
from torch import Tensor

_SHARE_LIMIT = tl.constexpr(2.0**62)
"""A share as a float is clipped here before it becomes an integer: past it the conversion is
undefined, and every bound it is compared with (a layer's size, what is left of k) is smaller."""
_RANK_LANES = 1024
"""Layers ranked at a time in pass 1."""
_NORM_TYPES = {
    torch.float64: tl.float64,
    torch.float32: tl.float32,
    torch.float16: tl.float16,
    torch.bfloat16: tl.bfloat16,
}


@triton.jit
def _norm(squares, norm_type: tl.constexpr):
    """sqrt in float64, rounded to the gradient's type through float32, to nearest even (as
    torch converts); a NaN ranks as the largest norm."""
    norm = tl.sqrt(squares)  # float64: correctly rounded (sqrt.rn.f64)
    large = norm != norm
    if norm_type != tl.float64:
        norm = norm.to(tl.float32)
        if norm_type == tl.bfloat16:  # by its bits: Triton's interpreter would truncate
            bits = norm.to(tl.uint32, bitcast=True)
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
            norm = bits.to(tl.float32, bitcast=True)
        elif norm_type != tl.float32:
            norm = norm.to(norm_type)
        norm = norm.to(tl.float64)
    return tl.where(large, float("inf"), norm)


@triton.jit
def _rank(
    squares_ptr, ascending_ptr, order_ptr, count, norm_type: tl.constexpr, lanes: tl.constexpr
):
    """Pass 1: the norms, ascending (ties: lower layer first), and the layer of each."""
    for tile in range(0, count, lanes):
        layer = tile + tl.arange(0, lanes)
        live = layer < count
        mine = _norm(tl.load(squares_ptr + layer, mask=live, other=0.0), norm_type)
        rank = tl.zeros([lanes], dtype=tl.int64)
        for other in range(count):
            theirs = _norm(tl.load(squares_ptr + other), norm_type)
            below = (theirs < mine) | ((theirs == mine) & (other < layer))
            rank += below.to(tl.int64)
        tl.store(ascending_ptr + rank, mine, mask=live)
        tl.store(order_ptr + rank, layer.to(tl.int64), mask=live)


@triton.jit
def _assign(ascending_ptr, order_ptr, sizes_ptr, ks_ptr, prefix_ptr, count, k, exact: tl.constexpr):
    """Pass 2: ``assign_local_k``, default or exact, from the ranked norms."""
    total = tl.zeros((), dtype=tl.float64)
    nonzero = tl.zeros((), dtype=tl.int64)
    room = tl.zeros((), dtype=tl.int64)
    for q in range(count):  # smallest norm first
        norm = tl.load(ascending_ptr + q)
        total += norm
        if exact:
            tl.store(prefix_ptr + q, total)
        nonzero += (norm > 0).to(tl.int64)
        room += tl.load(sizes_ptr + tl.load(order_ptr + q))
    tl.debug_barrier()
    k_rem = k.to(tl.int64)
    every_layer = k_rem >= count  # exact mode: every layer's floor is one element
    if exact:
        k_rem = tl.minimum(k_rem, room)
    floor_rem = tl.where(every_layer, count, nonzero).to(tl.int64)
    norm_rem = total
    for i in range(count):  # largest norm first
        q = count - 1 - i
        layer = tl.load(order_ptr + q)
        norm = tl.load(ascending_ptr + q)
        size = tl.load(sizes_ptr + layer)
        if exact:
            norm_rem = tl.load(prefix_ptr + q)  # the norms of this layer and those after it
        positive = norm_rem > 0
        ratio = k_rem.to(tl.float64) * norm / tl.where(positive, norm_rem, 1.0)
        share_f = tl.where(positive, tl.floor(ratio), 0.0)
        share_f = tl.minimum(tl.maximum(share_f, -_SHARE_LIMIT), _SHARE_LIMIT)
        share = share_f.to(tl.int64)
        if exact:
            floor = (every_layer | (norm > 0)).to(tl.int64)
            floor_rem -= floor  # the floors of the layers after this one
            room -= size  # and their room
            low = tl.minimum(size, tl.maximum(floor, k_rem - room))
            high = tl.minimum(size, k_rem - floor_rem)
            k_j = tl.maximum(low, tl.minimum(high, share))
        else:
            k_j = tl.minimum(size, tl.maximum(share, 1))
            norm_rem -= norm
        tl.store(ks_ptr + layer, k_j)
        k_rem -= k_j


@triton.jit
def _runs(ks_ptr, first_ptr, lengths_ptr, shifts_ptr, floor_ptr, count, total):
    """Pass 3: ``selection_runs``."""
    picked = tl.zeros((), dtype=tl.int64)
    for j in range(count):
        picked += tl.load(ks_ptr + j)
    pad = tl.maximum(total - picked, 0)
    tl.store(lengths_ptr, pad)
    tl.store(shifts_ptr, -pad)
    slot = pad
    lowest = tl.zeros((), dtype=tl.int64) - 1
    for j in range(count):
        first = tl.load(first_ptr + j)
        length = tl.minimum(tl.load(ks_ptr + j), total - slot)
        tl.store(lengths_ptr + 1 + j, length)
        tl.store(shifts_ptr + 1 + j, first - slot)
        lowest = tl.where((lowest < 0) & (length > 0), first, lowest)
        slot += length
    tl.store(floor_ptr, tl.maximum(lowest, 0))


@triton.jit(do_not_specialize=["count", "k", "total"])  # a count or k of 1 stays a value
def _lone_plan_kernel(
    squares_ptr,  # every layer's sum of squares (float64), in layer order (then any more)
    sizes_ptr,  # every layer's size (int64)
    first_ptr,  # where each layer's candidates start in the selection's order (int64)
    ks_ptr,  # out: every layer's k (int64)
    lengths_ptr,  # out: the selection's runs, padding first (int64, count + 1)
    shifts_ptr,  # out: each run's first place less its first slot (int64, count + 1)
    floor_ptr,  # out: the lowest place of a pick (int64, 1)
    ascending_ptr,  # scratch: the norms, ascending (float64)
    order_ptr,  # scratch: the layer of each (int64)
    prefix_ptr,  # scratch: the sum of the smallest q + 1 norms at q (float64, exact only)
    count,
    k,
    total,
    exact: tl.constexpr,
    norm_type: tl.constexpr,
    lanes: tl.constexpr,
):
    _rank(squares_ptr, ascending_ptr, order_ptr, count, norm_type, lanes)
    tl.debug_barrier()
    _assign(ascending_ptr, order_ptr, sizes_ptr, ks_ptr, prefix_ptr, count, k, exact)
    tl.debug_barrier()
    _runs(ks_ptr, first_ptr, lengths_ptr, shifts_ptr, floor_ptr, count, total)


def lone_plan_program(
    squares: Tensor,
    sizes: Tensor,
    first: Tensor,
    k: int,
    total: int,
    exact: bool,
    dtype: torch.dtype,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``deft_local_k.lone_plan`` in one launch (arguments and results as there)."""
    count = sizes.numel()
    device = squares.device
    ks = torch.empty(count, dtype=torch.int64, device=device)
    lengths = torch.empty(count + 1, dtype=torch.int64, device=device)
    shifts = torch.empty(count + 1, dtype=torch.int64, device=device)
    floor = torch.empty(1, dtype=torch.int64, device=device)
    ascending = torch.empty(count, dtype=torch.float64, device=device)
    order = torch.empty(count, dtype=torch.int64, device=device)
    prefix = torch.empty(count if exact else 1, dtype=torch.float64, device=device)
    # Triton launches on the current CUDA device (the interpreter's tests run on the CPU).
    on_device = torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()
    with on_device:
        _lone_plan_kernel[(1,)](
            squares,
            sizes,
            first,
            ks,
            lengths,
            shifts,
            floor,
            ascending,
            order,
            prefix,
            count,
            k,
            total,
            exact=exact,
            norm_type=_NORM_TYPES[dtype],
            lanes=_RANK_LANES,
        )
    return ks, lengths, shifts, floor
