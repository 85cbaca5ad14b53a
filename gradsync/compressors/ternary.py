"""TernGrad's quantizer as plain functions (SPECS §5.1), per tensor.

``clip_by_std`` bounds outliers at c·σ; ``ternarize`` maps g to s·{-1, 0, +1} with
P(t_k != 0) = min(1, |g_k|/s), which is unbiased for the clipped gradient; ``encode`` and
``decode`` put the ternary codes on the wire at 2 bits each.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gradsync.compressors.bitpack import pack, unpack

TERNARY_BITS = 2


def clip_by_std(grad: Tensor, c: float) -> Tensor:
    """``grad`` clipped to [-c·σ, c·σ], σ the population standard deviation; c = 0: unchanged."""
    if c <= 0 or grad.numel() < 2:
        return grad
    bound = c * float(grad.std(unbiased=False))
    return grad.clamp(-bound, bound)


def local_scaler(grad: Tensor) -> float:
    """s_w = max|g| (after clipping): the largest magnitude the ternary levels must cover."""
    return float(grad.abs().max()) if grad.numel() else 0.0


def ternarize(grad: Tensor, scaler: float, generator: torch.Generator) -> Tensor:
    """int8 codes in {-1, 0, +1}: sign(g_k) with probability min(1, |g_k|/scaler), else 0."""
    if scaler <= 0:
        return torch.zeros_like(grad, dtype=torch.int8)
    draws = torch.rand(grad.shape, generator=generator, device=grad.device, dtype=grad.dtype)
    keep = draws * scaler < grad.abs()
    return (torch.sign(grad) * keep).to(torch.int8)


def encode(codes: Tensor) -> Tensor:
    """Ternary codes packed four per byte (code + 1 in {0, 1, 2})."""
    return pack((codes.reshape(-1) + 1).to(torch.uint8), TERNARY_BITS)


def decode(packed: Tensor, numel: int) -> Tensor:
    """The ``numel`` int8 ternary codes ``encode`` packed."""
    return unpack(packed, TERNARY_BITS, numel).to(torch.int8) - 1
