"""TernGrad's quantizer as plain functions, per tensor (docs/methods/compressors/terngrad.md,
"How it works").

``clip_by_std`` bounds outliers at c·σ; ``ternarize`` maps g to s·{-1, 0, +1} with
P(t_k != 0) = min(1, |g_k|/s), which is unbiased for the clipped gradient; ``ternary_codes``
gives the same draws as the codes 1 + t_k that travel at ``TERNARY_BITS`` each.
"""

from __future__ import annotations

import torch
from torch import Tensor

TERNARY_BITS = 2


def clip_by_std(grad: Tensor, c: float) -> Tensor:
    """``grad`` clipped to [-c·σ, c·σ], σ the population standard deviation; c = 0: unchanged.
    The bound stays a tensor, so a GPU never waits on the host here."""
    if c <= 0 or grad.numel() < 2:
        return grad
    bound = c * grad.std(unbiased=False)
    return torch.clamp(grad, -bound, bound)


def local_scaler(grad: Tensor) -> Tensor:
    """s_w = max|g| (after clipping): the largest magnitude the ternary levels must cover (a 0-d
    tensor; 0 for an empty tensor)."""
    if not grad.numel():
        return grad.new_zeros(())
    low, high = torch.aminmax(grad)  # one pass, no |g| temporary
    return torch.maximum(high, -low)


def ternary_codes(grad: Tensor, scaler: Tensor | float, draws: Tensor) -> Tensor:
    """uint8 codes 1 + t_k in {0, 1, 2}, where t_k = sign(g_k) if u_k·s < |g_k| else 0, from
    uniform ``draws`` u in [0, 1) (overwritten: they are scratch). A zero scaler (an all-zero
    tensor) gives all zeros: no draw is below |g_k| = 0."""
    draws.mul_(scaler)
    up = torch.lt(draws, grad)  # g_k > u_k·s >= 0
    down = torch.lt(draws.add_(grad), 0)  # g_k < -u_k·s <= 0
    # Written without |g| and sign(g): each full-size temporary costs as much as the draws.
    return (up.view(torch.uint8) - down.view(torch.uint8)).add_(1)


def ternarize(grad: Tensor, scaler: Tensor | float, generator: torch.Generator) -> Tensor:
    """int8 codes in {-1, 0, +1}: sign(g_k) with probability min(1, |g_k|/scaler), else 0."""
    draws = torch.rand(grad.shape, generator=generator, device=grad.device, dtype=grad.dtype)
    return ternary_codes(grad, scaler, draws).view(torch.int8) - 1
