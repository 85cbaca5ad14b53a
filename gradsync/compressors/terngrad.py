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

from gradsync.compressors.counter_draws import DrawKey
from gradsync.compressors.fused import fused
from gradsync.compressors.fused_segments import Layout, reductions
from gradsync.compressors.options.quantizers import TernGradConfig
from gradsync.compressors.quant_kernels import encode_packed
from gradsync.compressors.quantized import PackedQuantizer, Statistics
from gradsync.compressors.segments import SegmentTables
from gradsync.compressors.ternary import TERNARY_BITS, clipped_codes, ternary_statistics
from gradsync.types import GroupInfo

CLASSIFIER_TENSORS = 2  # the logits layer's weight and bias


@fused
def terngrad_statistics(flat: Tensor, head: int, layout: Layout, clip: float) -> Statistics:
    """((clip bound,), local scalers) of the tensors of ``flat[:head]``."""
    bound, scalers = ternary_statistics(reductions(layout), flat[:head], clip)
    return (bound,), scalers


@fused
def terngrad_encode(
    flat: Tensor, head: int, tables: SegmentTables, key: DrawKey, parameters: tuple[Tensor, ...]
) -> Tensor:
    """``clipped_codes`` of ``flat[:head]`` at (bound, scaler) = ``parameters``, packed."""
    return encode_packed(clipped_codes, flat[:head], tables, TERNARY_BITS, key, parameters)


class TernGradCompressor(PackedQuantizer):
    bits = TERNARY_BITS
    stochastic = True
    code_offset, code_unit = 1.0, 1.0  # codes 0, 1, 2 -> -s, 0, +s
    error_feedback = False
    encoder = terngrad_encode

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

    def statistics(self, flat: Tensor, head: int, layout: Layout) -> Statistics:
        (bound,), scalers = terngrad_statistics(flat, head, layout, self.clip)
        if self.share_scalers:  # one all-reduce for all of the group's scalers
            self.collective.all_reduce((scalers,), op="max")
        return (bound, scalers), scalers

    def scales_agreed(self) -> bool:
        return self.share_scalers

    def codes(self, values: Tensor, draws: Tensor | None, *parameters: Tensor, out: Tensor) -> None:
        assert draws is not None
        out.copy_(clipped_codes(values, draws, *parameters))
