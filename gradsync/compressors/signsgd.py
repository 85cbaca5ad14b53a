"""``compressor=signsgd``: EF-signSGD (Karimireddy et al., ICML'19), one bit per element.

Per tensor of the error-compensated gradient p: send sign(p) as one bit and ``||p||_1 / d`` as
one float, so the worker's message is ``(||p||_1/d)·sign(p)``; what that misses stays in the
error-feedback residual (``feedback=auto`` keeps one). Zeros are sent as +1 times the scale,
and the residual takes the difference.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gradsync.compressors.quantized import PackedQuantizer
from gradsync.compressors.segments import Segments


class SignSGDCompressor(PackedQuantizer):
    bits = 1
    stochastic = False
    code_offset, code_unit = 0.5, 2.0  # codes 0, 1 -> -v, +v
    error_feedback = True

    def __init__(self, *, seed: int = 0) -> None:
        super().__init__(seed=seed)

    def scales(self, head: Tensor, layout: Segments) -> tuple[Tensor, Tensor]:
        return head, (layout.sums_of_magnitudes(head) / layout.lengths).float()

    def encode(
        self, values: Tensor, layout: Segments, scales: Tensor, draws: Tensor | None, out: Tensor
    ) -> None:
        torch.ge(values, 0, out=out.view(torch.bool))
