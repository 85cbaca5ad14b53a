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
from gradsync.compressors.options.quantizers import QSGDConfig
from gradsync.compressors.quantized import PackedQuantizer
from gradsync.compressors.segments import Segments


def bits_for_levels(levels: int) -> int:
    """The narrowest packable width (2, 4 or 8 bits) for the 2s + 1 codes of s levels."""
    if not 1 <= levels <= QSGD_MAX_LEVELS:
        raise ValueError(f"compressor.levels must be in [1, {QSGD_MAX_LEVELS}], got {levels}")
    return next(bits for bits in (2, 4, 8) if 2 * levels + 1 <= 2**bits)


class QSGDCompressor(PackedQuantizer):
    stochastic = True
    error_feedback = False

    def __init__(self, *, levels: int = QSGDConfig.levels, seed: int = 0) -> None:
        super().__init__(seed=seed)
        self.bits = bits_for_levels(levels)
        self.levels = levels
        self.code_offset, self.code_unit = float(levels), 1.0 / levels  # sign·level·v/s

    def scales(self, head: Tensor, layout: Segments) -> tuple[Tensor, Tensor]:
        return head, layout.sums_of_squares(head).sqrt_().float()

    def encode(
        self, values: Tensor, layout: Segments, scales: Tensor, draws: Tensor | None, out: Tensor
    ) -> None:
        assert draws is not None
        # An all-zero tensor has norm 0; the clamp keeps 0/0 out and its levels at 0.
        factors = self.levels / scales.clamp_min(torch.finfo(values.dtype).tiny)
        layout.map(self._codes, [values, draws], [factors], out=out)

    def _codes(self, part: Tensor, draws: Tensor, factor: Tensor, *, out: Tensor) -> None:
        """The codes ``sign·level + s``, level = floor(s·|g|/v + u), with ``factor`` = s/v."""
        s = self.levels
        level = draws.add_(part.abs().mul_(factor)).floor_().clamp_(max=s)  # may reach s + 1
        out.copy_(level.copysign_(part).add_(s))
