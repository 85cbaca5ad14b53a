"""TernGrad's quantizer as plain functions (docs/methods/compressors/terngrad.md, "How it
works"): per tensor, and for all tensors of a group at once.

``clip_by_std`` bounds outliers at c·σ; ``ternarize`` maps g to s·{-1, 0, +1} with
P(t_k != 0) = min(1, |g_k|/s), which is unbiased for the clipped gradient; ``ternary_codes``
gives the same draws as the codes 1 + t_k that travel at ``TERNARY_BITS`` each.
``ternary_statistics`` and ``clipped_codes`` do the same for a whole group, each tensor with its
own σ and scaler, without a clipped copy: an element is clipped where it is coded, and the
largest clipped magnitude is min(max|g|, c·σ).
"""

from __future__ import annotations

import torch
from torch import Tensor

from gradsync.compressors.fused_segments import FusedSegments
from gradsync.compressors.segments import Segments

TERNARY_BITS = 2


def clip_by_std(grad: Tensor, c: float) -> Tensor:
    """``grad`` clipped to [-c·σ, c·σ], σ the population standard deviation; c = 0: unchanged.
    The bound stays a tensor, so a GPU never waits on the host here."""
    if c <= 0 or grad.numel() < 2:
        return grad
    bound = c * grad.std(unbiased=False)
    return torch.clamp(grad, -bound, bound)


def clip_bounds(layout: Segments | FusedSegments, values: Tensor, c: float) -> Tensor:
    """c·σ of every segment of ``values`` (in their dtype), σ computed as ``std`` does, mean first
    and then the squared deviations, but summed in another order; inf where ``clip_by_std``
    leaves a tensor as it is (c = 0, fewer than two elements)."""
    if c <= 0:
        return torch.full_like(layout.lengths, torch.inf, dtype=values.dtype)
    mean = (layout.sums(values) / layout.lengths).to(values.dtype)
    std = (layout.sums_of_squares(values, mean) / layout.lengths).sqrt_().to(values.dtype)
    return torch.where(layout.lengths >= 2, std * c, torch.inf)


def ternary_statistics(
    layout: Segments | FusedSegments, values: Tensor, c: float
) -> tuple[Tensor, Tensor]:
    """(clip bound c·σ, local scaler s_w = max|g| after clipping) of every segment; the scaler
    is float32."""
    bound = clip_bounds(layout, values, c)
    # |clamp(g, -b, b)| = min(|g|, b), so the clipped maximum needs no clipped copy.
    return bound, torch.minimum(layout.max_magnitudes(values), bound).float()


def local_scaler(grad: Tensor) -> Tensor:
    """s_w = max|g| (after clipping): the largest magnitude the ternary levels must cover (a 0-d
    tensor; 0 for an empty tensor)."""
    if not grad.numel():
        return grad.new_zeros(())
    low, high = torch.aminmax(grad)  # one pass, no |g| temporary
    return torch.maximum(high, -low)


def codes_below(grad: Tensor, thresholds: Tensor) -> Tensor:
    """uint8 codes 1 + t_k in {0, 1, 2}, where t_k = sign(g_k) if thresholds_k < |g_k| else 0;
    ``thresholds`` (u_k·s, overwritten: they are scratch) are >= 0. A zero scaler (an all-zero
    tensor) gives all zeros: no threshold is below |g_k| = 0."""
    up = torch.lt(thresholds, grad)  # g_k > u_k·s >= 0
    # g_k < -u_k·s <= 0, compared without adding: a GPU would fuse u_k·s + g_k into one
    # multiply-add and round once where the definition rounds twice.
    down = torch.lt(grad, thresholds.neg_())
    # Written without |g| and sign(g): each full-size temporary costs as much as the draws.
    return torch.sub(up.to(torch.uint8), down.to(torch.uint8)).add_(1)


def clipped_codes(values: Tensor, draws: Tensor, bound: Tensor, scaler: Tensor) -> Tensor:
    """``ternary_codes`` of ``values`` clipped to [-bound, bound], at the uniform ``draws``
    (overwritten) times ``scaler``; bound and scaler broadcast."""
    return codes_below(values.clamp(-bound, bound), draws.mul_(scaler))


def ternary_codes(grad: Tensor, scaler: Tensor | float, draws: Tensor) -> Tensor:
    """``codes_below`` at u_k·s, from uniform ``draws`` u in [0, 1) (overwritten)."""
    return codes_below(grad, draws.mul_(scaler))


def ternarize(grad: Tensor, scaler: Tensor | float, generator: torch.Generator) -> Tensor:
    """int8 codes in {-1, 0, +1}: sign(g_k) with probability min(1, |g_k|/scaler), else 0."""
    draws = torch.rand(grad.shape, generator=generator, device=grad.device, dtype=grad.dtype)
    return ternary_codes(grad, scaler, draws).view(torch.int8) - 1
