"""``compressor=qsgd`` (Alistarh et al., NeurIPS'17): stochastic rounding to s levels
(docs/methods/compressors/qsgd.md).

Per tensor, with ``v = ||g||_2``: ``level = floor(s·|g_k|/v + u)``, ``u ~ U[0, 1)``, and the
value sent is ``sign(g_k)·level·v/s``, which is unbiased. The code ``sign·level + s`` takes
2s + 1 values and travels at the fewest bits of 2, 4 or 8 that hold them; the norm travels as
one float per tensor. No error feedback (unbiased).
"""

from __future__ import annotations

import torch
from torch import Tensor

from gradsync.compressors.choices import QSGD_MAX_LEVELS
from gradsync.compressors.counter_draws import DrawKey
from gradsync.compressors.fused import fused
from gradsync.compressors.fused_segments import Layout, reductions
from gradsync.compressors.options.quantizers import QSGDConfig
from gradsync.compressors.quant_kernels import encode_packed
from gradsync.compressors.quantized import PackedQuantizer, Statistics
from gradsync.compressors.segments import SegmentTables


def bits_for_levels(levels: int) -> int:
    """The narrowest packable width (2, 4 or 8 bits) for the 2s + 1 codes of s levels."""
    if not 1 <= levels <= QSGD_MAX_LEVELS:
        raise ValueError(f"compressor.levels must be in [1, {QSGD_MAX_LEVELS}], got {levels}")
    return next(bits for bits in (2, 4, 8) if 2 * levels + 1 <= 2**bits)


def qsgd_codes(values: Tensor, draws: Tensor, factor: Tensor, levels: int) -> Tensor:
    """The codes ``sign·level + s``, level = floor(s·|g|/v + u) (at most s), with ``factor`` =
    s/v, as floats."""
    # Capped at s before the draw is added: the same codes (a level past s is s either way),
    # and a GPU cannot fuse the product into the addition (one rounding for the definition's
    # two) across the cap.
    level = values.abs().mul_(factor).clamp_(max=levels).add_(draws).floor_().clamp_(max=levels)
    return level.copysign_(values).add_(levels)


@fused
def qsgd_statistics(flat: Tensor, head: int, layout: Layout, levels: int) -> Statistics:
    """((s/v,), v) for the tensors of ``flat[:head]``, v = ||g||₂."""
    values = flat[:head]
    norms = reductions(layout).sums_of_squares(values).sqrt_().float()
    # An all-zero tensor has norm 0; the clamp keeps 0/0 out and its levels at 0.
    return (levels / norms.clamp_min(torch.finfo(values.dtype).tiny),), norms


@fused
def qsgd_encode(
    flat: Tensor,
    head: int,
    tables: SegmentTables,
    key: DrawKey,
    parameters: tuple[Tensor, ...],
    levels: int,
    bits: int,
) -> Tensor:
    """``qsgd_codes`` of ``flat[:head]`` at the factors ``parameters``, packed."""
    return encode_packed(qsgd_codes, flat[:head], tables, bits, key, (*parameters, levels))


class QSGDCompressor(PackedQuantizer):
    stochastic = True
    error_feedback = False
    encoder = qsgd_encode

    def __init__(self, *, levels: int = QSGDConfig.levels, seed: int = 0) -> None:
        super().__init__(seed=seed)
        self.bits = bits_for_levels(levels)
        self.levels = levels
        self.code_offset, self.code_unit = float(levels), 1.0 / levels  # sign·level·v/s

    def statistics(self, flat: Tensor, head: int, layout: Layout) -> Statistics:
        return qsgd_statistics(flat, head, layout, self.levels)

    def codes(self, values: Tensor, draws: Tensor | None, *parameters: Tensor, out: Tensor) -> None:
        assert draws is not None
        (factor,) = parameters
        out.copy_(qsgd_codes(values, draws, factor, self.levels))

    def encoder_args(self) -> tuple[int, ...]:
        return self.levels, self.bits
