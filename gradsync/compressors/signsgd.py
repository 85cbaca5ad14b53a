"""``compressor=signsgd``: EF-signSGD (Karimireddy et al., ICML'19), one bit per element.

Per tensor of the error-compensated gradient p: send sign(p) as one bit and ``||p||_1 / d`` as
one float, so the worker's message is ``(||p||_1/d)·sign(p)``; what that misses stays in the
error-feedback residual (``feedback=auto`` keeps one). Zeros are sent as +1 times the scale,
and the residual takes the difference.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gradsync.compressors.fused import fused
from gradsync.compressors.fused_segments import Layout, reductions
from gradsync.compressors.quant_kernels import encode_packed
from gradsync.compressors.quantized import PackedQuantizer, Statistics
from gradsync.compressors.segments import SegmentTables

BITS = 1


def sign_codes(values: Tensor, draws: Tensor | None, *, out: Tensor | None = None) -> Tensor:
    """True (code 1) where g >= 0, zeros included, else False; into ``out`` when given."""
    return torch.ge(values, 0, out=out)


@fused
def signsgd_statistics(flat: Tensor, head: int, layout: Layout) -> Statistics:
    """((), ||g||₁/d) for the tensors of ``flat[:head]``."""
    tensors = reductions(layout)
    return (), (tensors.sums_of_magnitudes(flat[:head]) / tensors.lengths).float()


@fused
def signsgd_encode(
    flat: Tensor, head: int, tables: SegmentTables, key: None, parameters: tuple[()]
) -> Tensor:
    """``sign_codes`` of ``flat[:head]``, packed (no draws, no parameters)."""
    return encode_packed(sign_codes, flat[:head], tables, BITS, key, parameters)


class SignSGDCompressor(PackedQuantizer):
    bits = BITS
    stochastic = False
    code_offset, code_unit = 0.5, 2.0  # codes 0, 1 -> -v, +v
    error_feedback = True
    encoder = signsgd_encode

    def __init__(self, *, seed: int = 0) -> None:
        super().__init__(seed=seed)

    def statistics(self, flat: Tensor, head: int, layout: Layout) -> Statistics:
        return signsgd_statistics(flat, head, layout)

    def codes(self, values: Tensor, draws: Tensor | None, *parameters: Tensor, out: Tensor) -> None:
        sign_codes(values, draws, out=out.view(torch.bool))
