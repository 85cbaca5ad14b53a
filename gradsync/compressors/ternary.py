"""TernGrad's quantizer as plain functions (docs/methods/compressors/terngrad.md, "How it
works"): per tensor, and for all tensors of a group at once.

``clip_by_std`` bounds outliers at c·σ; ``ternarize`` maps g to s·{-1, 0, +1} with
P(t_k != 0) = min(1, |g_k|/s), which is unbiased for the clipped gradient; ``ternary_codes``
gives the same draws as the codes 1 + t_k that travel at ``TERNARY_BITS`` each.
``clip_segments_by_std`` and ``codes_at_scalers`` do the same for a whole group, each tensor with
its own σ and scaler.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gradsync.compressors.segments import Segments

TERNARY_BITS = 2


def clip_by_std(grad: Tensor, c: float) -> Tensor:
    """``grad`` clipped to [-c·σ, c·σ], σ the population standard deviation; c = 0: unchanged.
    The bound stays a tensor, so a GPU never waits on the host here."""
    if c <= 0 or grad.numel() < 2:
        return grad
    bound = c * grad.std(unbiased=False)
    return torch.clamp(grad, -bound, bound)


def clip_segments_by_std(values: Tensor, layout: Segments, c: float, *, out: Tensor) -> Tensor:
    """``clip_by_std`` of every segment of ``values``, into ``out`` (c > 0). σ is computed as
    ``std`` does, mean first and then the squared deviations, but summed in another order."""
    mean = (layout.sums(values) / layout.lengths).to(values.dtype)
    std = (layout.sums_of_squares(values, mean) / layout.lengths).sqrt_().to(values.dtype)
    # A tensor of fewer than two elements has no spread to clip by.
    bound = torch.where(layout.lengths >= 2, std * c, torch.inf)
    return layout.map(torch.clamp, [values], [-bound, bound], out=out)


def local_scaler(grad: Tensor) -> Tensor:
    """s_w = max|g| (after clipping): the largest magnitude the ternary levels must cover (a 0-d
    tensor; 0 for an empty tensor)."""
    if not grad.numel():
        return grad.new_zeros(())
    low, high = torch.aminmax(grad)  # one pass, no |g| temporary
    return torch.maximum(high, -low)


def codes_below(grad: Tensor, thresholds: Tensor, out: Tensor | None = None) -> Tensor:
    """uint8 codes 1 + t_k in {0, 1, 2}, where t_k = sign(g_k) if thresholds_k < |g_k| else 0;
    ``thresholds`` (u_k·s, overwritten: they are scratch) are >= 0. A zero scaler (an all-zero
    tensor) gives all zeros: no threshold is below |g_k| = 0."""
    up = torch.lt(thresholds, grad)  # g_k > u_k·s >= 0
    down = torch.lt(thresholds.add_(grad), 0)  # g_k < -u_k·s <= 0
    # Written without |g| and sign(g): each full-size temporary costs as much as the draws.
    return torch.sub(up.view(torch.uint8), down.view(torch.uint8), out=out).add_(1)


def codes_at_scalers(grad: Tensor, draws: Tensor, scaler: Tensor, *, out: Tensor) -> Tensor:
    """``ternary_codes`` into ``out``, as ``Segments.map`` calls it: ``scaler`` broadcast."""
    return codes_below(grad, draws.mul_(scaler), out=out)


def ternary_codes(grad: Tensor, scaler: Tensor | float, draws: Tensor) -> Tensor:
    """``codes_below`` at u_k·s, from uniform ``draws`` u in [0, 1) (overwritten)."""
    return codes_below(grad, draws.mul_(scaler))


def ternarize(grad: Tensor, scaler: Tensor | float, generator: torch.Generator) -> Tensor:
    """int8 codes in {-1, 0, +1}: sign(g_k) with probability min(1, |g_k|/scaler), else 0."""
    draws = torch.rand(grad.shape, generator=generator, device=grad.device, dtype=grad.dtype)
    return ternary_codes(grad, scaler, draws).view(torch.int8) - 1
