"""The quantizers' per-element work as one kernel each way, on a GPU's route
(docs/methods/compressors/*.md for what each method computes).

Encoding reads a group's values once and writes the packed bytes: each element finds its
tensor's parameters (its segment, by binary search in the segments' ends), computes its draw
from its index (``counter_draws``), its code (the method's rule), and every byte gathers its
``8 // bits`` codes with shifts. Decoding reads the bytes and writes the values straight into
the output. Each is a plain tensor function, the definition; ``fused`` compiles it on a GPU's
route, and tests hold the compiled kernel to the definition.

Each method wraps ``encode_packed`` in a fused function of its own: one compiled code object
per method, so one method's variants never crowd another's out of Dynamo's cache.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from gradsync.compressors.bitpack import SUPPORTED_BITS
from gradsync.compressors.counter_draws import DrawKey, counter_uniform
from gradsync.compressors.fused import fused
from gradsync.compressors.fused_segments import segment_of
from gradsync.compressors.segments import SegmentTables

CodeRule = Callable[..., Tensor]
"""``rule(values, draws, *parameters)``: integer codes in [0, 2**bits) for float32 ``values``
(draws: uniform in [0, 1), or None for a deterministic method); a tensor parameter holds one
value per element, anything else is a constant."""


def encode_packed(
    rule: CodeRule,
    values: Tensor,
    tables: SegmentTables,
    bits: int,
    key: DrawKey | None,
    parameters: tuple[Any, ...],
) -> Tensor:
    """``values``' codes under ``rule``, packed ``8 // bits`` to a byte, little end first (as
    ``bitpack.pack``); each tensor of ``parameters`` holds one value per segment of ``tables``;
    ``key``: the draws' (None: no draws)."""
    numel, per_byte = values.numel(), 8 // _literal(bits)
    byte = torch.arange(-(-numel // per_byte), device=values.device)
    packed = torch.zeros_like(byte)
    for slot in range(per_byte):
        # Each slot's codes are computed where their bytes are packed: codes computed once and
        # read by every slot would be stored (and read back) by a compiled kernel.
        index = byte * per_byte + slot
        at = index.clamp(max=numel - 1)  # the last byte's padding: its codes are zero
        segment = segment_of(at, tables.ends) if parameters else at
        draws = None if key is None else counter_uniform(index, key)
        spread = [p[segment] if isinstance(p, Tensor) else p for p in parameters]
        codes = rule(values[at].float(), draws, *spread)
        packed |= torch.where(index < numel, codes, 0).to(torch.int64) << slot * bits
    return packed.to(torch.uint8)


def unpack_codes(packed: Tensor, bits: int, numel: int) -> Tensor:
    """The first ``numel`` codes (int64) in ``packed``."""
    per_byte = 8 // bits
    index = torch.arange(numel, device=packed.device)
    byte = packed[index // per_byte].to(torch.int64)
    mask: int = 2**bits - 1
    return (byte >> (index % per_byte * bits)) & mask


def _literal(bits: int) -> int:
    """``bits`` as a plain int where a compiled function got it as a symbol: packing is then
    compiled for one width, its loop over a byte's codes unrolled (with a symbolic width the
    codes are stored before they are packed)."""
    for width in SUPPORTED_BITS:
        if bits == width:
            return width
    raise ValueError(f"bits must be one of {SUPPORTED_BITS}, got {bits}")


@fused
def decode_packed(
    packed: Tensor, scales: Tensor, ends: Tensor, out: Tensor, bits: int, offset: float, unit: float
) -> None:
    """``out`` = each code c of a tensor with scale v as ``(c - offset)·(unit·v)``; ``ends``:
    where the tensors end."""
    codes = unpack_codes(packed, bits, out.numel())
    segment = segment_of(torch.arange(out.numel(), device=out.device), ends)
    factors = scales.float() * unit
    out.copy_((codes.to(torch.float32) - offset) * factors[segment])
