"""``compressor=terngrad`` (TernGrad, NeurIPS'17): every tensor becomes s·{-1, 0, +1}
(docs/methods/compressors/terngrad.md).

Per tensor: clip at c·σ (``clip``; 0 turns it off), take the local scaler max|g|, share the
largest scaler over workers (one float per tensor, all-reduced with MAX; ``share_scalers=false``
sends each worker's own instead), draw unbiased ternary values, and send them at 2 bits each.
The last classifier layer (the group's last two tensors, weight and bias) stays float unless
``quantize_last``. No error feedback: TernGrad is unbiased for the clipped gradient.
"""

from __future__ import annotations

from torch import Tensor

from gradsync.compressors.options.quantizers import TernGradConfig
from gradsync.compressors.quantized import PackedQuantizer
from gradsync.compressors.segments import Segments
from gradsync.compressors.ternary import TERNARY_BITS, clip_segments_by_std, codes_at_scalers
from gradsync.types import GroupInfo

CLASSIFIER_TENSORS = 2  # the logits layer's weight and bias


class TernGradCompressor(PackedQuantizer):
    bits = TERNARY_BITS
    stochastic = True
    code_offset, code_unit = 1.0, 1.0  # codes 0, 1, 2 -> -s, 0, +s
    error_feedback = False

    def __init__(
        self,
        *,
        clip: float = TernGradConfig.clip,
        share_scalers: bool = TernGradConfig.share_scalers,
        quantize_last: bool = TernGradConfig.quantize_last,
        float_every_epochs: int = TernGradConfig.float_every_epochs,
        seed: int = 0,
    ) -> None:
        super().__init__(seed=seed)
        self.clip = clip
        self.share_scalers = share_scalers
        self.float_last = 0 if quantize_last else CLASSIFIER_TENSORS
        """The model's last tensors that travel as floats."""
        self.float_every_epochs = float_every_epochs
        """Every E-th epoch goes entirely in float (0: never)."""

    def float_tensors(self, group: GroupInfo, tensors: int) -> int:
        every = self.float_every_epochs
        if every > 0 and (group.epoch + 1) % every == 0:  # the E-th, 2E-th, ... epoch
            return tensors
        # The model's last ``float_last`` tensors, as far as they are in this group: its last
        # parts when the group is laid out in model order.
        return min(tensors, max(0, self.float_last - group.tensors_after))

    def scales(self, head: Tensor, layout: Segments) -> tuple[Tensor, Tensor]:
        clipped = head
        if self.clip > 0:
            out = self._scratch.get("clipped", head.numel(), head)
            clipped = clip_segments_by_std(head, layout, self.clip, out=out)
        scalers = layout.max_magnitudes(clipped).float()  # s_w = max|g| after clipping
        if self.share_scalers:  # one all-reduce for all of the group's scalers
            self.collective.all_reduce((scalers,), op="max")
        return clipped, scalers

    def scales_agreed(self) -> bool:
        return self.share_scalers

    def encode(
        self, values: Tensor, layout: Segments, scales: Tensor, draws: Tensor | None, out: Tensor
    ) -> None:
        assert draws is not None
        layout.map(codes_at_scalers, [values, draws], [scales], out=out)
