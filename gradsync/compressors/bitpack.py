"""Packing small integer codes densely into bytes, so quantized gradients cost what they say.

``pack(codes, bits)`` stores ``8 // bits`` codes per byte (little end first); ``unpack`` restores
exactly ``numel`` codes, whatever the padding. Codes must lie in ``[0, 2**bits)``.
"""

from __future__ import annotations

import torch
from torch import Tensor

SUPPORTED_BITS = (1, 2, 4)


def _shifts(bits: int, device: torch.device) -> Tensor:
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"bits must be one of {SUPPORTED_BITS}, got {bits}")
    return torch.arange(0, 8, bits, dtype=torch.uint8, device=device)


def packed_size(numel: int, bits: int) -> int:
    """Bytes that ``numel`` codes of ``bits`` bits occupy once packed."""
    per_byte = 8 // bits
    return -(-numel // per_byte)


def pack(codes: Tensor, bits: int) -> Tensor:
    """uint8 tensor of ``packed_size(codes.numel(), bits)`` bytes."""
    shifts = _shifts(bits, codes.device)
    per_byte = shifts.numel()
    flat = codes.reshape(-1).to(torch.uint8)
    padding = (-flat.numel()) % per_byte
    if padding:
        flat = torch.cat([flat, flat.new_zeros(padding)])
    grouped = flat.view(-1, per_byte) << shifts
    return grouped.sum(dim=1, dtype=torch.uint8)


def unpack(packed: Tensor, bits: int, numel: int) -> Tensor:
    """The first ``numel`` codes (uint8) stored in ``packed``."""
    shifts = _shifts(bits, packed.device)
    mask = (1 << bits) - 1
    codes = (packed.reshape(-1, 1) >> shifts) & mask
    return codes.reshape(-1)[:numel]
