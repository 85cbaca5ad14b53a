"""Compressors that send every element and all-reduce it directly: as it is (``none``) or in a
narrower float type (``fp16``, ``bf16``).

A narrow type is summed in that type on the wire (as NCCL and gloo do for half-precision
all-reduce) and widened back before averaging. Rounding loses at most half a unit in the last
place of the narrow type per element, so no error feedback is kept by default.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from gradsync.types import Collective, Payload, Sizes


class DenseCompressor:
    allreducible = True
    lossless = False
    error_feedback = False
    density = 1.0
    wire_dtype: torch.dtype | None = None
    """The type on the wire; None: the gradient's own (no copy)."""

    def bind(self, collective: Collective) -> None:
        return None  # nothing to agree on

    def compress(
        self, grad: Tensor, *, name: str, step: int, epoch: int = 0, sizes: Sizes = None, **_: int
    ) -> tuple[Payload, Any]:
        return (grad.to(self.wire_dtype or grad.dtype),), grad.dtype

    def decompress(self, payload: Payload, ctx: torch.dtype) -> Tensor:
        return payload[0].to(ctx)

    def selected(self, payload: Payload, ctx: Any) -> Tensor | None:
        return None
